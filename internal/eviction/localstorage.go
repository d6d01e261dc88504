package eviction

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/errdefs"
)

// VolumeUsage measures pod volumes on disk.
type VolumeUsage interface {
	// EmptyDirUsage returns the bytes pod's emptyDir volume takes on
	// disk; a volume not set up is an error wrapping errdefs.ErrNotFound.
	EmptyDirUsage(ctx context.Context, pod *v1.Pod, volume string) (int64, error)
}

// localStorageEviction evicts at once every pod with a disk-backed
// emptyDir using more than its sizeLimit (a Memory emptyDir is a tmpfs of
// that size, which cannot outgrow it), as the kubelet's local-storage
// pass does at each observation. It reports whether it evicted any.
// Pods evicted before and still stopping are not evicted again.
func (m *Manager) localStorageEviction(ctx context.Context, pods []*v1.Pod) bool {
	if m.deps.Volumes == nil {
		return false
	}
	m.forgetGone(pods)
	evicted := false
	for _, pod := range pods {
		if isCritical(pod) || m.wasEvicted(pod.UID) {
			continue
		}
		msg, over := m.emptyDirOverLimit(ctx, pod)
		if !over {
			continue
		}
		m.log.Warn("evicting pod: emptyDir over its sizeLimit", "pod", pod.Namespace+"/"+pod.Name, "gracePeriod", immediateGracePeriod)
		st := v1.PodStatus{Phase: v1.PodFailed, Reason: Reason, Message: msg}
		if m.evict(pod, st, immediateGracePeriod) {
			evicted = true
		}
	}
	return evicted
}

// emptyDirOverLimit returns the eviction message for pod's first disk
// emptyDir that uses more than its sizeLimit.
func (m *Manager) emptyDirOverLimit(ctx context.Context, pod *v1.Pod) (string, bool) {
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		ed := vol.EmptyDir
		if ed == nil || ed.Medium == v1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.Sign() <= 0 {
			continue
		}
		used, err := m.deps.Volumes.EmptyDirUsage(ctx, pod, vol.Name)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			m.log.Warn("emptyDir usage not measured", "pod", pod.Namespace+"/"+pod.Name, "volume", vol.Name, "err", err)
			continue
		}
		if used > ed.SizeLimit.Value() {
			return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", vol.Name, ed.SizeLimit.String()), true
		}
	}
	return "", false
}

// forgetGone forgets evicted pods that are no longer active, so a pod
// that comes back with the same UID (a static pod's manifest restored)
// is judged afresh.
func (m *Manager) forgetGone(pods []*v1.Pod) {
	present := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		present[p.UID] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.evicted {
		if !present[uid] {
			delete(m.evicted, uid)
		}
	}
}

func (m *Manager) wasEvicted(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.evicted[uid]
	return ok
}
