package lifecycle

import (
	"context"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/podspec"
)

// Pods is what the agent knows about pods: the desired pods from the
// sources, pods still terminating after their source let go of them, pods
// rejected at admission, and the last status of each. The Loop and the
// Syncer write it; the HTTP API, the prober, eviction and the device
// manager read it. Safe for concurrent use.
type Pods struct {
	store StatusStore // may be nil: statuses are then not kept across restarts

	mu           sync.RWMutex
	desired      map[types.UID]*v1.Pod // from the sources
	leaving      map[types.UID]*v1.Pod // let go of by their source, not yet terminated
	rejected     map[types.UID]bool    // failed admission: never run
	statuses     map[types.UID]v1.PodStatus
	final        map[types.UID]v1.PodStatus // set by eviction: the status a pod ends with
	started      map[types.UID]bool         // start latency already reported
	seen         map[types.UID]time.Time    // when this run first saw each pod
	spoke        map[string]bool            // sources whose first snapshot was handled
	spokeCh      chan struct{}              // closed (and replaced) when spoke grows
	sourcesReady bool                       // every source has been read once
}

// NewPods returns an empty view that keeps statuses in store (nil: only in
// memory).
func NewPods(store StatusStore) *Pods {
	return &Pods{
		store:    store,
		desired:  map[types.UID]*v1.Pod{},
		leaving:  map[types.UID]*v1.Pod{},
		rejected: map[types.UID]bool{},
		statuses: map[types.UID]v1.PodStatus{},
		final:    map[types.UID]v1.PodStatus{},
		started:  map[types.UID]bool{},
		seen:     map[types.UID]time.Time{},
		spoke:    map[string]bool{},
		spokeCh:  make(chan struct{}),
	}
}

// Pod returns a pod the agent knows, desired or leaving.
func (s *Pods) Pod(uid types.UID) (*v1.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if p, ok := s.desired[uid]; ok {
		return p, true
	}
	p, ok := s.leaving[uid]
	return p, ok
}

// GetPodStatus returns a pod's last status: this run's, else the one the
// previous run saved. (The prober reads statuses through it.)
func (s *Pods) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.RLock()
	st, ok := s.statuses[uid]
	s.mu.RUnlock()
	if !ok && s.store != nil {
		return s.store.Restored(uid)
	}
	return st, ok
}

// Active returns the admitted, desired pods that are not terminal: what
// admission counts as using the node, oldest first.
func (s *Pods) Active() []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*v1.Pod
	for uid, p := range s.desired {
		if s.rejected[uid] {
			continue
		}
		if st, ok := s.statuses[uid]; ok && isTerminal(st.Phase) {
			continue
		}
		out = append(out, p)
	}
	sortPods(out)
	return out
}

// List returns every pod with its status, for the API: desired pods and
// those still leaving (which carry a deletion timestamp, as kubectl shows
// Terminating pods), by namespace, name and UID.
func (s *Pods) List() []v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]v1.Pod, 0, len(s.desired)+len(s.leaving))
	add := func(p *v1.Pod) {
		c := *p.DeepCopy()
		if st, ok := s.statuses[p.UID]; ok {
			c.Status = st
		} else if st, ok := s.restoredLocked(p.UID); ok {
			c.Status = st // not synced yet since a restart: as last saved
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

// restoredLocked returns the status the last run saved for a pod this run
// has not synced yet; s.mu must be held.
func (s *Pods) restoredLocked(uid types.UID) (v1.PodStatus, bool) {
	if s.store == nil || s.rejected[uid] {
		return v1.PodStatus{}, false
	}
	return s.store.Restored(uid)
}

// IsGone reports whether a pod's leftovers may be removed: every source
// has been read and none of them, nor a terminating worker, knows the pod.
// Until the sources were read, every pod counts as alive.
func (s *Pods) IsGone(uid types.UID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.sourcesReady {
		return false
	}
	_, desired := s.desired[uid]
	_, leaving := s.leaving[uid]
	return !desired && !leaving
}

// setStatus publishes a pod's status and saves it for the next run. A pod
// forgotten meanwhile stays forgotten (a late write from its worker).
func (s *Pods) setStatus(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	_, known := s.desired[uid]
	_, leaving := s.leaving[uid]
	if known || leaving {
		s.statuses[uid] = st
	}
	s.mu.Unlock()
	if (known || leaving) && s.store != nil {
		s.store.Save(uid, st)
	}
}

// setFinal records the status a pod must end with once it is stopped
// (eviction, a rejection found after a restart).
func (s *Pods) setFinal(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.final[uid] = st
}

// finalStatus returns the status recorded by setFinal.
func (s *Pods) finalStatus(uid types.UID) (v1.PodStatus, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.final[uid]
	return st, ok
}

// firstStart reports true the first time it is asked about a pod: its
// start latency is reported once.
func (s *Pods) firstStart(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started[uid] {
		return false
	}
	s.started[uid] = true
	return true
}

// sourceSpoke records that a source's snapshot was handled: its pods are
// listed.
func (s *Pods) sourceSpoke(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spoke[source] {
		return
	}
	s.spoke[source] = true
	close(s.spokeCh)
	s.spokeCh = make(chan struct{})
}

// WaitForSources returns once the first snapshot of each of sources was
// handled, so a listing shows their pods, or with ctx's error. A starting
// agent waits for it before it answers /pods, which would otherwise come
// back empty right after a restart.
func (s *Pods) WaitForSources(ctx context.Context, sources []string) error {
	for {
		s.mu.RLock()
		ch, all := s.spokeCh, true
		for _, src := range sources {
			all = all && s.spoke[src]
		}
		s.mu.RUnlock()
		if all {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// markSeen records when this run first saw a pod (the start of its start
// latency); later calls keep the first time.
func (s *Pods) markSeen(uid types.UID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[uid]; !ok {
		s.seen[uid] = now
	}
}

// firstSeen returns when this run first saw a pod.
func (s *Pods) firstSeen(uid types.UID) (time.Time, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.seen[uid]
	return t, ok
}

func (s *Pods) isLeaving(uid types.UID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.leaving[uid]
	return ok
}

func (s *Pods) isRejected(uid types.UID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rejected[uid]
}

// setDesired records the newest spec of a desired pod.
func (s *Pods) setDesired(p *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.desired[p.UID] = p
}

// fromSource returns the desired pods that came from source.
func (s *Pods) fromSource(source string) []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*v1.Pod
	for _, p := range s.desired {
		if p.Annotations[podspec.AnnotationConfigSource] == source {
			out = append(out, p)
		}
	}
	return out
}

// reject marks a pod as failed admission, with its status. The status is
// not saved: a restarted agent admits the pod afresh.
func (s *Pods) reject(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected[uid] = true
	s.statuses[uid] = st
}

// markLeaving moves a pod from desired to leaving.
func (s *Pods) markLeaving(p *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.desired, p.UID)
	s.leaving[p.UID] = p
}

// markSourcesReady records that every source has been read once.
func (s *Pods) markSourcesReady() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sourcesReady = true
}

// forget drops every trace of a pod.
func (s *Pods) forget(uid types.UID) {
	s.mu.Lock()
	delete(s.desired, uid)
	delete(s.leaving, uid)
	delete(s.rejected, uid)
	delete(s.statuses, uid)
	delete(s.final, uid)
	delete(s.started, uid)
	delete(s.seen, uid)
	s.mu.Unlock()
	if s.store != nil {
		s.store.Remove(uid)
	}
}

// sortPods orders pods oldest first (UID breaks ties): admission order.
func sortPods(ps []*v1.Pod) {
	sort.Slice(ps, func(i, j int) bool {
		if !ps[i].CreationTimestamp.Equal(&ps[j].CreationTimestamp) {
			return ps[i].CreationTimestamp.Before(&ps[j].CreationTimestamp)
		}
		return ps[i].UID < ps[j].UID
	})
}

func isTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }
