package devicemanager

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// RunningPods tells which pods still have containers that may use their
// devices (created or running). The agent answers from the runtime.
type RunningPods interface {
	RunningPods(ctx context.Context) (sets.Set[types.UID], error)
}

// RunningPodsFunc adapts a function to RunningPods.
type RunningPodsFunc func(ctx context.Context) (sets.Set[types.UID], error)

// RunningPods calls f.
func (f RunningPodsFunc) RunningPods(ctx context.Context) (sets.Set[types.UID], error) { return f(ctx) }

// runningCheckTimeout bounds one question to the runtime.
const runningCheckTimeout = 10 * time.Second

// A pod's devices are freed only once none of its containers can still
// be using them: a pod whose containers never started (a rejected new
// pod) lets go at once; a pod that may have containers running (it
// started one in this run, or it was restored from the checkpoint) keeps
// its devices until the runtime reports its containers stopped. So a pod
// rejected or deleted while its containers are in their grace period
// never has its devices handed to another pod.

// Release lets go of the devices of a pod that a later admission step
// rejected, or that finished terminating. See the rule above: without a
// RunningPods the caller is trusted and they are freed at once.
func (m *Manager) Release(uid types.UID) {
	m.mu.Lock()
	_, holds := m.podDevs[uid]
	mayRun := m.mayRun.Has(uid)
	m.mu.Unlock()
	if !holds {
		return
	}
	if mayRun && m.cfg.Running != nil {
		ctx, cancel := context.WithTimeout(context.Background(), runningCheckTimeout)
		running, err := m.cfg.Running.RunningPods(ctx)
		cancel()
		if err != nil || running.Has(uid) {
			m.mu.Lock()
			m.releasing.Insert(uid)
			m.mu.Unlock()
			m.log.Info("pod's devices stay allocated until its containers have stopped", "pod", uid, "err", err)
			return
		}
	}
	m.RemovePod(uid)
}

// RemovePod frees every device the pod holds, at once.
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removePodLocked(uid)
}

func (m *Manager) removePodLocked(uid types.UID) {
	m.releasing.Delete(uid)
	m.mayRun.Delete(uid)
	if _, ok := m.podDevs[uid]; !ok {
		return
	}
	delete(m.podDevs, uid)
	m.allocated = m.podDevs.inUse()
	m.saveLocked()
}

// UpdateAllocatedDevices frees the devices of every pod not in active
// whose containers have stopped (see the rule above). Call it from
// housekeeping once all pod sources have been seen.
func (m *Manager) UpdateAllocatedDevices(active []*v1.Pod) {
	keep := sets.New[types.UID]()
	for _, p := range active {
		if p != nil {
			keep.Insert(p.UID)
		}
	}
	m.mu.Lock()
	var candidates []types.UID
	needCheck := false
	for uid := range m.podDevs {
		if !keep.Has(uid) {
			candidates = append(candidates, uid)
			needCheck = needCheck || m.mayRun.Has(uid)
		}
	}
	m.mu.Unlock()
	if len(candidates) == 0 {
		return
	}
	var running sets.Set[types.UID]
	if needCheck && m.cfg.Running != nil {
		ctx, cancel := context.WithTimeout(context.Background(), runningCheckTimeout)
		r, err := m.cfg.Running.RunningPods(ctx)
		cancel()
		if err != nil {
			m.log.Warn("cannot tell which pods still run; their devices stay allocated for now", "err", err)
			return
		}
		running = r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, uid := range candidates {
		if running.Has(uid) {
			m.releasing.Insert(uid)
			continue
		}
		m.removePodLocked(uid)
	}
}

// Releasing lists the pods that left but whose devices stay allocated
// until their containers stop, sorted.
func (m *Manager) Releasing() []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return sets.List(m.releasing)
}
