package lifecycle

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/podspec"
)

// mirrorState is what the API server holds under a static pod's name, as
// far as keeping its mirror in step goes.
type mirrorState struct {
	uid      types.UID // "" when there is no mirror
	hash     string
	deleting bool
}

func stateOf(m *v1.Pod) mirrorState {
	if m == nil {
		return mirrorState{}
	}
	return mirrorState{uid: m.UID, hash: m.Annotations[podspec.AnnotationConfigMirror], deleting: m.DeletionTimestamp != nil}
}

// inStep reports whether the mirror is a live mirror of this version of
// the static pod.
func (m mirrorState) inStep(static *v1.Pod) bool {
	return m.uid != "" && !m.deleting && m.hash == podspec.MirrorHash(static)
}

// checkMirrors looks at the API server's mirror pods (the API source's
// full set) and has each running static pod whose mirror is out of step —
// gone, being deleted, or of another version — sync now: its sync brings
// the mirror back in step (Publisher.PublishStatus). Without this, an
// admin deleting a mirror waits for the pod's next periodic sync.
//
// A pod is synced once for each out-of-step mirror seen, not at every
// snapshot: if its sync could not fix the mirror (the API server
// refused), the next sync retries, and the loop does not spin on a mirror
// that stays as it is.
func (l *Loop) checkMirrors(mirrors []*v1.Pod) {
	byName := make(map[string]*v1.Pod, len(mirrors))
	for _, m := range mirrors {
		byName[podspec.FullName(m)] = m
	}
	static := map[types.UID]bool{}
	for _, p := range l.cfg.Pods.Active() {
		if !podspec.IsStatic(p) {
			continue
		}
		static[p.UID] = true
		st := stateOf(byName[podspec.FullName(p)])
		if st.inStep(p) {
			delete(l.mirrorsAsked, p.UID)
			continue
		}
		if last, asked := l.mirrorsAsked[p.UID]; asked && last == st {
			continue
		}
		l.mirrorsAsked[p.UID] = st
		l.log.Debug("mirror pod out of step; syncing the static pod", "pod", podRef(p),
			"mirror", st.uid, "mirrorHash", st.hash, "deleting", st.deleting)
		l.HandleEvent(p.UID)
	}
	for uid := range l.mirrorsAsked {
		if !static[uid] {
			delete(l.mirrorsAsked, uid)
		}
	}
}
