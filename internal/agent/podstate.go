package agent

import (
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podState is what the agent knows about pods: the desired pods from the
// sources, pods still terminating after their manifest went away, and the
// last status generated for each. The sync loop writes it; the HTTP API,
// the prober and the workers read it.
type podState struct {
	mu       sync.RWMutex
	desired  map[types.UID]*v1.Pod // from the sources
	leaving  map[types.UID]*v1.Pod // deleted from the sources, not yet terminated
	rejected map[types.UID]bool    // failed admission: never run
	statuses map[types.UID]v1.PodStatus
	final    map[types.UID]v1.PodStatus // set by eviction: the status a pod ends with
	saved    *statusFiles               // may be nil (tests)
}

func newPodState() *podState {
	return &podState{
		desired:  map[types.UID]*v1.Pod{},
		leaving:  map[types.UID]*v1.Pod{},
		rejected: map[types.UID]bool{},
		statuses: map[types.UID]v1.PodStatus{},
		final:    map[types.UID]v1.PodStatus{},
	}
}

// setFinal records the status a pod must end with once it is stopped.
func (s *podState) setFinal(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.final[uid] = st
}

// finalStatus returns the status recorded by setFinal, if any.
func (s *podState) finalStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.final[uid]
	return st, ok
}

// pod returns a pod known to the agent, desired or leaving.
func (s *podState) pod(uid types.UID) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if p, ok := s.desired[uid]; ok {
		return p, true
	}
	p, ok := s.leaving[uid]
	return p, ok
}

// status returns the last status of a pod: this run's, else the one the
// previous run saved.
func (s *podState) status(uid types.UID) (v1.PodStatus, bool) {
	s.mu.RLock()
	st, ok := s.statuses[uid]
	s.mu.RUnlock()
	if !ok && s.saved != nil {
		return s.saved.restoredStatus(uid)
	}
	return st, ok
}

// setStatus publishes a pod's status and saves it for the next run. Only
// the pod's worker calls it, so saves of one pod never race.
func (s *podState) setStatus(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	_, known := s.desired[uid]
	_, leaving := s.leaving[uid]
	if known || leaving {
		s.statuses[uid] = st
	}
	s.mu.Unlock()
	if (known || leaving) && s.saved != nil {
		s.saved.save(uid, st)
	}
}

// GetPodStatus implements the prober's status provider.
func (s *podState) GetPodStatus(uid types.UID) (v1.PodStatus, bool) { return s.status(uid) }

// active returns the admitted, desired pods that are not terminal: what
// admission counts as using the node.
func (s *podState) active() []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*v1.Pod
	for uid, p := range s.desired {
		if s.rejected[uid] {
			continue
		}
		if st, ok := s.statuses[uid]; ok && (st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed) {
			continue
		}
		out = append(out, p)
	}
	sortPods(out)
	return out
}

// list returns every pod with its status, for the API: desired pods and
// those still leaving (shown with a deletion timestamp, as kubectl shows
// Terminating pods).
func (s *podState) list() []v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]v1.Pod, 0, len(s.desired)+len(s.leaving))
	add := func(p *v1.Pod) {
		c := *p.DeepCopy()
		if st, ok := s.statuses[p.UID]; ok {
			c.Status = st
		} else {
			c.Status.Phase = v1.PodPending
		}
		c.Kind, c.APIVersion = "Pod", "v1"
		out = append(out, c)
	}
	for _, p := range s.desired {
		add(p)
	}
	for _, p := range s.leaving {
		add(p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].UID < out[j].UID
	})
	return out
}

func sortPods(ps []*v1.Pod) {
	sort.Slice(ps, func(i, j int) bool {
		if !ps[i].CreationTimestamp.Equal(&ps[j].CreationTimestamp) {
			return ps[i].CreationTimestamp.Before(&ps[j].CreationTimestamp)
		}
		return ps[i].UID < ps[j].UID
	})
}

func (s *podState) isLeaving(uid types.UID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.leaving[uid]
	return ok
}

func (s *podState) isRejected(uid types.UID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rejected[uid]
}

// setDesired records the newest spec of a desired pod.
func (s *podState) setDesired(p *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.desired[p.UID] = p
}

// fromSource returns the desired pods that came from source.
func (s *podState) fromSource(source string) []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*v1.Pod
	for _, p := range s.desired {
		if p.Annotations[sourceAnnotation] == source {
			out = append(out, p)
		}
	}
	return out
}

func (s *podState) reject(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected[uid] = true
	s.statuses[uid] = st
}

// markLeaving moves a pod from desired to leaving.
func (s *podState) markLeaving(p *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.desired, p.UID)
	s.leaving[p.UID] = p
}

// forget drops every trace of a pod.
func (s *podState) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.desired, uid)
	delete(s.leaving, uid)
	delete(s.rejected, uid)
	delete(s.statuses, uid)
	delete(s.final, uid)
	if s.saved != nil {
		s.saved.remove(uid)
	}
}

// sourceAnnotation names the source a pod came from, as the kubelet does.
const sourceAnnotation = "kubernetes.io/config.source"
