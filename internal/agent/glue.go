package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	utilexec "k8s.io/utils/exec"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/metrics"
	"github.com/minilet/minilet/internal/prober"
	"github.com/minilet/minilet/internal/prober/probe/exec"
	"github.com/minilet/minilet/internal/server"
	"github.com/minilet/minilet/internal/status"
)

// admit decides whether a new pod may run: devices first (as the kubelet's
// allocation handler runs before its resource fit), then the resource fit.
func (a *Agent) admit(ctx context.Context, pod *v1.Pod, active []*v1.Pod) (reason, message string, ok bool) {
	if err := a.devices.Allocate(ctx, pod); err != nil {
		var ae *devicemanager.AdmissionError
		if errors.As(err, &ae) {
			return ae.Reason(), err.Error(), false
		}
		return devicemanager.ReasonUnexpectedAdmissionError, err.Error(), false
	}
	if ok, reason, msg := a.cgroups.Admit(pod, active); !ok {
		a.devices.RemovePod(pod.UID)
		return reason, msg, false
	}
	if ok, reason, msg := a.eviction.Admit(pod); !ok {
		a.devices.RemovePod(pod.UID)
		return reason, msg, false
	}
	a.holdImages(pod)
	return "", "", true
}

// holdImages keeps image GC away from the images of an admitted pod until
// it is gone.
func (a *Agent) holdImages(pod *v1.Pod) {
	var releases []func()
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		releases = append(releases, a.imageGC.MarkInUse(c.Image))
	}
	a.imageHolds.Store(pod.UID, releases)
}

// releaseImages ends holdImages for a pod.
func (a *Agent) releaseImages(uid types.UID) {
	if v, ok := a.imageHolds.LoadAndDelete(uid); ok {
		for _, release := range v.([]func()) {
			release()
		}
	}
}

// generateStatus computes a pod's status from what the runtime holds.
func (a *Agent) generateStatus(pod *v1.Pod, rs *container.PodStatus, waiting map[string]status.Waiting) v1.PodStatus {
	prev, ok := a.pods.status(pod.UID)
	var p *v1.PodStatus
	if ok {
		p = &prev
	}
	return a.statusGen.Generate(pod, rs, p, waiting, a.clock.Now())
}

// markStarted records the pod start latency the first time all of a pod's
// containers run.
func (a *Agent) markStarted(pod *v1.Pod, st v1.PodStatus) {
	if st.Phase != v1.PodRunning || len(st.ContainerStatuses) == 0 {
		return
	}
	for _, c := range st.ContainerStatuses {
		if c.State.Running == nil {
			return
		}
	}
	if a.startLatency.first(pod.UID) {
		a.metrics.k.PodStartDuration.Observe(a.clock.Since(pod.CreationTimestamp.Time).Seconds())
	}
}

// periodic runs the cleanups that need no hurry: container GC, orphaned
// cgroups and probe workers, and the gauges.
func (a *Agent) periodic(ctx context.Context) {
	now := a.clock.Now()
	desired := map[types.UID]struct{}{}
	keep := map[types.UID]bool{}
	for _, p := range a.pods.list() {
		desired[p.UID] = struct{}{}
		keep[p.UID] = true
	}
	for uid := range a.workers.Known() {
		keep[uid] = true
	}
	a.prober.CleanupPods(desired)
	if now.Sub(a.lastGC) >= time.Minute {
		a.lastGC = now
		isGone := func(uid types.UID) bool { return !keep[uid] }
		if err := a.runtime.GarbageCollect(ctx, 1, isGone); err != nil {
			a.log.Warn("container garbage collection failed", "err", err)
		}
		if err := a.cgroups.CleanupOrphans(ctx, keep); err != nil {
			a.log.Warn("cleaning up orphaned pod cgroups failed", "err", err)
		}
		a.cleanupMirrorPods(ctx)
	}
	a.updateGauges()
}

func (a *Agent) updateGauges() {
	running, containers := 0, map[string]int{}
	for _, p := range a.pods.list() {
		if p.Status.Phase == v1.PodRunning {
			running++
		}
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Running != nil:
				containers["running"]++
			case c.State.Terminated != nil:
				containers["exited"]++
			case c.State.Waiting != nil:
				containers["created"]++
			}
		}
	}
	a.metrics.k.RunningPods.Set(float64(running))
	for _, s := range []string{"running", "exited", "created"} {
		a.metrics.k.RunningContainers.WithLabelValues(s).Set(float64(containers[s]))
	}
}

// agentMetrics wraps the kubelet-named metrics the agent updates.
type agentMetrics struct{ k *metrics.Kubelet }

func newAgentMetrics(reg prometheus.Registerer, node string) (*agentMetrics, error) {
	k, err := metrics.NewKubelet(reg, node)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	return &agentMetrics{k: k}, nil
}

func (m *agentMetrics) observeSync(op string, d time.Duration) {
	m.k.PodWorkerDuration.WithLabelValues(op).Observe(d.Seconds())
}

// startLatency remembers which pods already reported their start.
type startLatency struct {
	mu   sync.Mutex
	seen map[types.UID]bool
}

func newStartLatency() *startLatency { return &startLatency{seen: map[types.UID]bool{}} }

func (s *startLatency) first(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[uid] {
		return false
	}
	s.seen[uid] = true
	return true
}

func (s *startLatency) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, uid)
}

// execer runs exec probes through the container runtime.
type execer struct{ a *Agent }

var _ exec.Execer = execer{}

func (e execer) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	stdout, stderr, err := e.a.cri.ExecSync(ctx, trimRuntimePrefix(containerID), cmd, timeout)
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) {
		return stdout, stderr, int32(exitErr.ExitStatus()), nil
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return stdout, stderr, -1, fmt.Errorf("%w: %w", exec.ErrTimedOut, err)
		}
		return stdout, stderr, -1, err
	}
	return stdout, stderr, 0, nil
}

// The read-only API's view of the agent.
var (
	_ server.PodLister               = (*Agent)(nil)
	_ server.NodeGetter              = (*Agent)(nil)
	_ server.EventLister             = (*Agent)(nil)
	_ server.LogLocator              = (*Agent)(nil)
	_ server.ContainerRunningChecker = (*Agent)(nil)
	_ server.SummaryProvider         = (*Agent)(nil)
	_ server.DeviceLister            = (*Agent)(nil)
)

// Pods lists every pod with its status.
func (a *Agent) Pods() []v1.Pod { return a.pods.list() }

// Node returns the node object.
func (a *Agent) Node() *v1.Node { return a.buildNode() }

// Events lists recorded events, of one pod when name is given.
func (a *Agent) Events(namespace, name string) ([]v1.Event, error) {
	return a.events.List(namespace, name)
}

// findPod finds a listed pod by namespace and name.
func (a *Agent) findPod(namespace, name string) (v1.Pod, bool) {
	for _, p := range a.pods.list() {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return v1.Pod{}, false
}

// ContainerLogPath returns the log file of a container's current (or
// previous) attempt.
func (a *Agent) ContainerLogPath(namespace, pod, containerName string, previous bool) (string, error) {
	p, ok := a.findPod(namespace, pod)
	if !ok {
		return "", fmt.Errorf("pod %s/%s: %w", namespace, pod, errdefs.ErrNotFound)
	}
	cs := findContainerStatus(p, containerName)
	if cs == nil {
		return "", fmt.Errorf("container %q in pod %s/%s: %w", containerName, namespace, pod, errdefs.ErrNotFound)
	}
	attempt := cs.RestartCount
	if previous {
		if cs.LastTerminationState.Terminated == nil {
			return "", fmt.Errorf("previous terminated container %q in pod %s/%s: %w", containerName, namespace, pod, errdefs.ErrNotFound)
		}
		attempt--
	} else if cs.ContainerID == "" {
		return "", fmt.Errorf("container %q in pod %s/%s has not started yet: %w", containerName, namespace, pod, errdefs.ErrNotFound)
	}
	dir := fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID)
	return filepath.Join(a.cfg.RootDir, "logs", dir, containerName, fmt.Sprintf("%d.log", attempt)), nil
}

// ContainerRunning reports whether a container runs now (followed logs end
// when it stops).
func (a *Agent) ContainerRunning(namespace, pod, containerName string) bool {
	p, ok := a.findPod(namespace, pod)
	if !ok {
		return false
	}
	cs := findContainerStatus(p, containerName)
	return cs != nil && cs.State.Running != nil
}

func findContainerStatus(p v1.Pod, name string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// Summary serves the kubelet's Summary API from the cgroups.
func (a *Agent) Summary(ctx context.Context) (*statsapi.Summary, error) {
	list := a.pods.list()
	pods := make([]*v1.Pod, 0, len(list))
	for i := range list {
		pods = append(pods, &list[i])
	}
	return a.cm.Summary(ctx, pods)
}

// Devices lists the devices the plugins advertise and who holds them.
func (a *Agent) Devices() []server.Device {
	var out []server.Device
	for _, d := range a.devmgr.Devices() {
		dev := server.Device{Resource: d.Resource, ID: d.ID, Health: "Healthy", Container: d.Container}
		if !d.Healthy {
			dev.Health = "Unhealthy"
		}
		if d.PodUID != "" {
			if p, ok := a.pods.pod(d.PodUID); ok {
				dev.Pod = p.Namespace + "/" + p.Name
			}
		}
		out = append(out, dev)
	}
	return out
}

// trimRuntimePrefix turns "minilet://ID" into "ID".
func trimRuntimePrefix(id string) string {
	if i := strings.Index(id, "://"); i >= 0 {
		return id[i+3:]
	}
	return id
}

// probeResults lets the runtime manager, which knows bare container IDs,
// ask the prober, which knows the IDs of the pod status ("minilet://ID").
type probeResults struct {
	m      *prober.Manager
	prefix string
}

func (p probeResults) LivenessFailed(id string) bool { return p.m.LivenessFailed(p.prefix + id) }
func (p probeResults) StartupFailed(id string) bool  { return p.m.StartupFailed(p.prefix + id) }
