package prober

import (
	"math/rand/v2"
	"time"

	"github.com/minilet/minilet/internal/podspec"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// probedContainers lists the containers of pod that can have probes: the
// app containers and the restartable (sidecar) init containers, with the
// field path used in messages.
func probedContainers(pod *v1.Pod) []probedContainer {
	var out []probedContainer
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podspec.IsSidecar(c) {
			out = append(out, probedContainer{c: c, init: true, path: fieldPath("spec.initContainers", i)})
		}
	}
	for i := range pod.Spec.Containers {
		out = append(out, probedContainer{c: &pod.Spec.Containers[i], path: fieldPath("spec.containers", i)})
	}
	return out
}

type probedContainer struct {
	c    *v1.Container
	init bool
	path string
}

func probeOf(c *v1.Container, k Kind) *v1.Probe {
	switch k {
	case Liveness:
		return c.LivenessProbe
	case Readiness:
		return c.ReadinessProbe
	default:
		return c.StartupProbe
	}
}

// AddPod starts the probes of pod's containers. A pod whose probes are
// invalid is rejected as a whole with an ErrInvalidArgument error that
// names the field. Adding a pod twice keeps the running workers.
func (m *Manager) AddPod(pod *v1.Pod) error {
	if err := validatePod(pod); err != nil {
		return err
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pc := range probedContainers(pod) {
		for _, k := range []Kind{Startup, Readiness, Liveness} {
			p := probeOf(pc.c, k)
			if p == nil {
				continue
			}
			key := probeKey{podUID: pod.UID, container: pc.c.Name, kind: k}
			if _, ok := m.workers[key]; ok {
				continue
			}
			w := newWorker(key, pod, pc.c, pc.init, p)
			m.workers[key] = w
			m.metrics.prepare(w)
			m.sched.add(w, m.firstDue(w, now))
		}
	}
	return nil
}

// firstDue spreads the first probes of an agent that started less than a
// period ago over that period, so a restarted agent does not fire every
// probe at once; later pods are probed at once, as the kubelet does.
func (m *Manager) firstDue(w *worker, now time.Time) time.Time {
	if now.Sub(m.start) >= w.period {
		return now
	}
	return now.Add(time.Duration(rand.Int64N(int64(w.period))))
}

// StopLivenessAndStartup stops the liveness and startup probes of a pod
// that is terminating; its readiness probes keep running until RemovePod.
func (m *Manager) StopLivenessAndStartup(pod *v1.Pod) {
	m.stopKinds(pod.UID, Liveness, Startup)
}

// RemovePod stops every probe of pod and forgets its results.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.stopKinds(pod.UID, Liveness, Readiness, Startup)
}

func (m *Manager) stopKinds(uid types.UID, kinds ...Kind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, w := range m.workers {
		if key.podUID != uid {
			continue
		}
		for _, k := range kinds {
			if key.kind == k {
				m.stopWorkerLocked(w)
			}
		}
	}
}

// CleanupPods stops the probes of every pod not in desired.
func (m *Manager) CleanupPods(desired map[types.UID]struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, w := range m.workers {
		if _, ok := desired[key.podUID]; !ok {
			m.stopWorkerLocked(w)
		}
	}
}

// UpdatePodStatus fills Started and Ready of s's container statuses from
// the probe results. A container is started when it runs and its startup
// probe succeeded (or it has none); it is ready when it is started, runs
// and its readiness probe succeeded (or it has none). A started container
// whose readiness probe has not run yet is probed at once. Non-restartable
// init containers are ready once they exited 0.
func (m *Manager) UpdatePodStatus(pod *v1.Pod, s *v1.PodStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range s.ContainerStatuses {
		m.updateContainerLocked(pod.UID, &s.ContainerStatuses[i])
	}
	inits := map[string]*v1.Container{}
	for i := range pod.Spec.InitContainers {
		inits[pod.Spec.InitContainers[i].Name] = &pod.Spec.InitContainers[i]
	}
	for i := range s.InitContainerStatuses {
		cs := &s.InitContainerStatuses[i]
		c, ok := inits[cs.Name]
		if ok && !podspec.IsSidecar(c) {
			started := cs.State.Running != nil
			cs.Started = &started
			if cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 {
				cs.Ready = true
			}
			continue
		}
		m.updateContainerLocked(pod.UID, cs)
	}
}

func (m *Manager) updateContainerLocked(uid types.UID, cs *v1.ContainerStatus) {
	started := m.startedLocked(uid, cs)
	cs.Started = &started
	if !started {
		cs.Ready = false
		return
	}
	if r, ok := m.results[Readiness][cs.ContainerID]; ok && r == Success {
		cs.Ready = true
		return
	}
	w, ok := m.workers[probeKey{podUID: uid, container: cs.Name, kind: Readiness}]
	if !ok {
		cs.Ready = true // no readiness probe: ready once started
		return
	}
	_, hasResult := m.results[Readiness][cs.ContainerID]
	cs.Ready = !hasResult && m.cfg.LastReadiness != nil && m.cfg.LastReadiness(cs.ContainerID)
	if w.probedID != cs.ContainerID {
		m.sched.trigger(w)
	}
}

// startedLocked: running, and the startup probe succeeded or there is none.
func (m *Manager) startedLocked(uid types.UID, cs *v1.ContainerStatus) bool {
	if cs.State.Running == nil {
		return false
	}
	if r, ok := m.results[Startup][cs.ContainerID]; ok {
		return r == Success
	}
	_, hasProbe := m.workers[probeKey{podUID: uid, container: cs.Name, kind: Startup}]
	return !hasProbe || m.cfg.LastStarted != nil && m.cfg.LastStarted(cs.ContainerID)
}

// containerStarted is startedLocked for a worker.
func (m *Manager) containerStarted(uid types.UID, cs *v1.ContainerStatus) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.startedLocked(uid, cs)
}
