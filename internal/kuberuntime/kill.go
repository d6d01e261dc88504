package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	probehttp "github.com/minilet/minilet/internal/prober/probe/http"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
)

// minimumGracePeriod is the shortest stop window a container gets (unless
// the caller overrides it), so a slow preStop hook does not turn a stop
// into an immediate SIGKILL.
const minimumGracePeriod = 2

// KillPod stops every running container of the pod in parallel, each with
// the pod's termination grace period less the time its preStop hook took
// (gracePeriodOverride replaces it when set), then stops the pod's
// sandboxes. pod may be nil, or carry no containers in its spec, for a pod
// the runtime holds but no source knows any more (orphans): its name comes
// from status, and its grace period and preStop hooks from what was
// recorded on its containers when they were created.
func (m *Manager) KillPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, gracePeriodOverride *int64) error {
	if ps == nil {
		return nil
	}
	var recorded map[string]*v1.Container // container ID -> rebuilt spec
	if pod == nil || len(pod.Spec.Containers) == 0 {
		if pod == nil {
			pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ps.Name, Namespace: ps.Namespace, UID: ps.UID}}
		} else {
			pod = pod.DeepCopy()
		}
		var grace *int64
		grace, recorded = m.recordedSpecs(ctx, ps)
		if pod.Spec.TerminationGracePeriodSeconds == nil {
			pod.Spec.TerminationGracePeriodSeconds = grace
		}
	}
	podIP := newestSandboxIP(ps)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	after := stopOrder(pod, ps)
	for _, c := range ps.Containers {
		if c.State != container.StateRunning {
			continue
		}
		spec := specOf(pod, c.Name)
		if spec == nil {
			spec = recorded[c.ID.ID]
		}
		wg.Add(1)
		go func(c *container.ContainerStatus) {
			defer wg.Done()
			defer close(after.stopped[c.ID.ID])
			err := m.killContainerAfter(ctx, pod, spec, c.ID.ID, podIP, "Stopping container "+c.Name, "", gracePeriodOverride, after.waitFor[c.ID.ID])
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	for _, sb := range ps.Sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if err := m.cfg.Runtime.StopPodSandbox(ctx, sb.ID); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("stop sandbox %s of pod %s: %w", sb.ID, podDesc(pod), err))
		}
	}
	return errors.Join(errs...)
}

// recordedSpecs reads, from the annotations of the pod's running
// containers, the grace period the pod had when they were created and
// what each needs to be stopped (for orphans, whose spec is gone).
func (m *Manager) recordedSpecs(ctx context.Context, ps *container.PodStatus) (*int64, map[string]*v1.Container) {
	var grace *int64
	specs := map[string]*v1.Container{}
	for _, c := range ps.Containers {
		if c.State != container.StateRunning {
			continue
		}
		resp, err := m.cfg.Runtime.ContainerStatus(ctx, c.ID.ID, false)
		if err != nil {
			continue
		}
		ann := resp.GetStatus().GetAnnotations()
		if v, err := strconv.ParseInt(ann[annotationGracePeriod], 10, 64); err == nil && grace == nil {
			grace = &v
		}
		specs[c.ID.ID] = specFromAnnotations(c.Name, ann)
	}
	return grace, specs
}

func newestSandboxIP(ps *container.PodStatus) string {
	if sb, _ := ps.NewestSandbox(); sb != nil {
		return sb.IP
	}
	return ""
}

func specOf(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for _, c := range podspec.EphemeralContainers(pod) {
		if c.Name == name {
			return &c
		}
	}
	return nil
}

// stopPlan says, per running container ID, which other containers must
// have stopped before it is stopped, and is closed once it has stopped.
type stopPlan struct {
	waitFor map[string][]<-chan struct{}
	stopped map[string]chan struct{}
}

// stopOrder orders a pod's termination as the kubelet does with sidecars:
// regular containers stop first, all at once; sidecars (restartable init
// containers) only after every regular container and every later sidecar
// has stopped, so a sidecar serves the app until the app is gone.
func stopOrder(pod *v1.Pod, ps *container.PodStatus) stopPlan {
	plan := stopPlan{waitFor: map[string][]<-chan struct{}{}, stopped: map[string]chan struct{}{}}
	sidecarIndex := map[string]int{}
	for i := range pod.Spec.InitContainers {
		if podspec.IsSidecar(&pod.Spec.InitContainers[i]) {
			sidecarIndex[pod.Spec.InitContainers[i].Name] = i
		}
	}
	var running []*container.ContainerStatus
	for _, c := range ps.Containers {
		if c.State == container.StateRunning {
			running = append(running, c)
			plan.stopped[c.ID.ID] = make(chan struct{})
		}
	}
	for _, c := range running {
		mine, sidecar := sidecarIndex[c.Name]
		if !sidecar {
			continue
		}
		for _, o := range running {
			if theirs, oSidecar := sidecarIndex[o.Name]; o.ID != c.ID && (!oSidecar || theirs > mine) {
				plan.waitFor[c.ID.ID] = append(plan.waitFor[c.ID.ID], plan.stopped[o.ID.ID])
			}
		}
	}
	return plan
}

// killContainer stops one container: Killing event, preStop hook, then
// StopContainer with what is left of the grace period. reason "liveness"
// or "startup" uses the probe's own grace period when it sets one.
func (m *Manager) killContainer(ctx context.Context, pod *v1.Pod, spec *v1.Container, id, podIP, message, reason string, gracePeriodOverride *int64) error {
	return m.killContainerAfter(ctx, pod, spec, id, podIP, message, reason, gracePeriodOverride, nil)
}

// killContainerAfter is killContainer that, after the preStop hook, waits
// (within the grace period, which the wait uses up) for the after channels
// to close before it stops the container.
func (m *Manager) killContainerAfter(ctx context.Context, pod *v1.Pod, spec *v1.Container, id, podIP, message, reason string,
	gracePeriodOverride *int64, after []<-chan struct{}) error {
	grace := gracePeriodOf(pod)
	if spec != nil {
		var p *v1.Probe
		switch reason {
		case "liveness":
			p = spec.LivenessProbe
		case "startup":
			p = spec.StartupProbe
		}
		if p != nil && p.TerminationGracePeriodSeconds != nil {
			grace = *p.TerminationGracePeriodSeconds
		}
	}
	m.cfg.Recorder.Event(pod, v1.EventTypeNormal, "Killing", message)
	if spec != nil && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && grace > 0 {
		start := m.clock.Now()
		if msg, err := m.runHook(ctx, pod, spec, id, podIP, spec.Lifecycle.PreStop, time.Duration(grace)*time.Second); err != nil {
			m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: %s", msg)
		}
		grace -= int64(m.clock.Since(start).Seconds())
	}
	if len(after) > 0 && grace > 0 {
		grace -= m.waitForTurn(ctx, after, time.Duration(grace)*time.Second)
	}
	if grace < minimumGracePeriod {
		grace = minimumGracePeriod
	}
	if gracePeriodOverride != nil {
		grace = *gracePeriodOverride
	}
	m.log.Info("stopping container", "pod", podDesc(pod), "id", id, "gracePeriod", grace)
	if err := m.cfg.Runtime.StopContainer(ctx, id, grace); err != nil && !isNotFound(err) {
		return fmt.Errorf("stop container %s of pod %s: %w", id, podDesc(pod), err)
	}
	return nil
}

// waitForTurn waits until every channel is closed, at most limit, and
// returns the whole seconds it waited.
func (m *Manager) waitForTurn(ctx context.Context, after []<-chan struct{}, limit time.Duration) int64 {
	start := m.clock.Now()
	timer := m.clock.NewTimer(limit)
	defer timer.Stop()
	for _, ch := range after {
		select {
		case <-ch:
		case <-timer.C():
			return int64(m.clock.Since(start).Seconds())
		case <-ctx.Done():
			return int64(m.clock.Since(start).Seconds())
		}
	}
	return int64(m.clock.Since(start).Seconds())
}

// runHook runs a postStart or preStop handler. timeout 0 means none
// (beyond ctx). It returns a message for the failure event.
func (m *Manager) runHook(ctx context.Context, pod *v1.Pod, c *v1.Container, id, podIP string, h *v1.LifecycleHandler, timeout time.Duration) (string, error) {
	switch {
	case h.Exec != nil:
		stdout, stderr, err := m.cfg.Runtime.ExecSync(ctx, id, h.Exec.Command, timeout)
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				h.Exec.Command, c.Name, podDesc(pod), err, string(stdout)+string(stderr)), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := m.httpHook(ctx, c, podIP, h.HTTPGet, timeout); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, podDesc(pod), err), err
		}
		return "", nil
	case h.Sleep != nil:
		d := time.Duration(h.Sleep.Seconds) * time.Second
		if timeout > 0 && d > timeout {
			d = timeout // a preStop sleep ends with the grace period
		}
		select {
		case <-m.clock.After(d):
			return "", nil
		case <-ctx.Done():
			return "sleep hook interrupted", ctx.Err()
		}
	}
	return "", nil
}

func (m *Manager) httpHook(ctx context.Context, c *v1.Container, podIP string, g *v1.HTTPGetAction, timeout time.Duration) error {
	if podIP == "" {
		podIP = m.cfg.HostIP
	}
	if podIP == "" {
		podIP = "127.0.0.1"
	}
	// The request as a probe's: the path may carry a query, named ports
	// resolve, the kubelet's headers.
	req, err := probehttp.NewRequest(g, c, podIP)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req = req.WithContext(ctx)
	resp, err := m.hookClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	return nil
}
