package images

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodHolds keeps image garbage collection away from the images of every
// admitted pod until the pod is gone, even before its containers exist.
// It takes part in admission (it never rejects) and releases a pod's
// images when the pod is released.
type PodHolds struct {
	gc *GC

	mu    sync.Mutex
	holds map[types.UID][]func()
}

// NewPodHolds returns holds over gc.
func NewPodHolds(gc *GC) *PodHolds {
	return &PodHolds{gc: gc, holds: map[types.UID][]func(){}}
}

// Admit holds the images of the pod's containers; it always admits.
func (h *PodHolds) Admit(_ context.Context, pod *v1.Pod, _ []*v1.Pod) (ok bool, reason, message string) {
	var releases []func()
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			releases = append(releases, h.gc.MarkInUse(c.Image))
		}
	}
	h.mu.Lock()
	old := h.holds[pod.UID]
	h.holds[pod.UID] = releases
	h.mu.Unlock()
	for _, release := range old {
		release()
	}
	return true, "", ""
}

// Release ends the holds of a pod.
func (h *PodHolds) Release(uid types.UID) {
	h.mu.Lock()
	releases := h.holds[uid]
	delete(h.holds, uid)
	h.mu.Unlock()
	for _, release := range releases {
		release()
	}
}
