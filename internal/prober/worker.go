package prober

import (
	"context"
	"time"

	"github.com/minilet/minilet/internal/podspec"
	v1 "k8s.io/api/core/v1"
)

// worker is one probe of one container. Its probe state is touched only by
// doProbe, which the scheduler never runs twice at once for a worker.
type worker struct {
	key       probeKey
	kind      Kind
	pod       *v1.Pod
	container v1.Container
	init      bool // a restartable init container
	spec      v1.Probe
	period    time.Duration
	initial   Result

	// Probe state, owned by doProbe.
	containerID string
	lastResult  Result
	resultRun   int
	onHold      bool

	// Guarded by Manager.mu.
	stopped     bool
	publishedID string // container ID whose result is in Manager.results
	probedID    string // container ID a real probe has run against

	// Guarded by scheduler.mu.
	due       time.Time
	gen       uint64 // bumped on every (re)schedule and on cancel
	queued    bool   // waiting in the heap
	running   bool
	triggered bool
	cancelled bool
}

func newWorker(key probeKey, pod *v1.Pod, c *v1.Container, init bool, p *v1.Probe) *worker {
	spec := withDefaults(p)
	w := &worker{
		key:       key,
		kind:      key.kind,
		pod:       pod,
		container: *c,
		init:      init,
		spec:      spec,
		period:    seconds(spec.PeriodSeconds),
	}
	switch key.kind {
	case Readiness:
		w.initial = Failure
	case Liveness:
		w.initial = Success
	default:
		w.initial = Unknown
	}
	return w
}

// findStatus returns the status of w's container.
func findStatus(s *v1.PodStatus, w *worker) (*v1.ContainerStatus, bool) {
	list := s.ContainerStatuses
	if w.init {
		list = s.InitContainerStatuses
	}
	for i := range list {
		if list[i].Name == w.container.Name {
			return &list[i], true
		}
	}
	return nil, false
}

// doProbe is one step of w: it looks at the pod's status, maybe runs the
// probe, and publishes a result once a threshold is crossed. It returns
// false when the worker has nothing more to do.
func (m *Manager) doProbe(ctx context.Context, w *worker) (keepGoing bool) {
	status, ok := m.cfg.Status.GetPodStatus(w.pod.UID)
	if !ok {
		return true // not created yet
	}
	if status.Phase == v1.PodFailed || status.Phase == v1.PodSucceeded {
		m.log.Debug("pod finished, probe worker exits", "pod", podRef(w.pod), "container", w.container.Name, "probe", w.kind)
		return false
	}
	c, ok := findStatus(&status, w)
	if !ok || c.ContainerID == "" {
		return true // wait for the container
	}
	if c.ContainerID != w.containerID {
		// A new container: start over.
		w.containerID = c.ContainerID
		w.onHold = false
		w.lastResult, w.resultRun = Unknown, 0
		initial := w.initial
		if w.kind == Readiness && m.cfg.LastReadiness != nil && m.cfg.LastReadiness(c.ContainerID) {
			initial = Success
			w.lastResult, w.resultRun = Success, int(w.spec.SuccessThreshold)
		}
		if w.kind == Startup && m.cfg.LastStarted != nil && m.cfg.LastStarted(c.ContainerID) {
			initial = Success // started before the agent restarted: stays so
		}
		m.setResult(w, w.containerID, initial)
	}
	if w.onHold {
		return true // failed; waiting for the runtime to replace the container
	}
	if c.State.Running == nil {
		m.setResult(w, w.containerID, Failure)
		// Keep going unless the container is gone for good.
		return c.State.Terminated == nil || w.init ||
			podspec.RestartsAfterExit(&w.container, w.pod.Spec.RestartPolicy, c.State.Terminated.ExitCode)
	}
	if w.pod.DeletionTimestamp != nil && (w.kind == Liveness || w.kind == Startup) {
		m.setResult(w, w.containerID, Success) // a quiet shutdown
		return false
	}
	if m.clock.Since(c.State.Running.StartedAt.Time) < seconds(w.spec.InitialDelaySeconds) {
		return true
	}
	// Startup gates the others, and rests once the container started (the
	// worker stays for the container's next instance).
	if started := m.containerStarted(w.pod.UID, c); started == (w.kind == Startup) {
		return true
	}

	result, err := m.runProbe(ctx, w, &status)
	m.markProbed(w, w.containerID)
	if err != nil {
		return true // could not probe: does not count
	}
	if result == w.lastResult {
		w.resultRun++
	} else {
		w.lastResult, w.resultRun = result, 1
	}
	if (result == Failure && w.resultRun < int(w.spec.FailureThreshold)) ||
		(result == Success && w.resultRun < int(w.spec.SuccessThreshold)) {
		return true
	}
	m.setResult(w, w.containerID, result)
	if result == Failure && (w.kind == Liveness || w.kind == Startup) {
		// The container will be restarted: hold until the new one appears.
		w.onHold = true
		w.resultRun = 0
	}
	return true
}

func podRef(p *v1.Pod) string { return p.Namespace + "/" + p.Name }
