package cluster

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/podspec"
)

// Publisher tells the API server what the sync loop and the pod workers
// decided: pod statuses (on mirror pods for static pods), pods that
// stopped for good, and mirror pods left over. Requests that may wait for
// an unreachable API server run on goroutines of their own, so callers
// never block on the network; Wait waits for them.
type Publisher struct {
	c        *Cluster
	log      *slog.Logger
	wg       sync.WaitGroup
	cleaning atomic.Bool // a CleanupMirrors runs
}

// NewPublisher returns a Publisher over c.
func NewPublisher(c *Cluster) *Publisher {
	return &Publisher{c: c, log: c.log}
}

// PublishStatus queues a pod's new status for the API server (the status
// writer sends it), first making sure a static pod has its mirror pod.
func (p *Publisher) PublishStatus(ctx context.Context, pod *v1.Pod, st v1.PodStatus) {
	if podspec.IsStatic(pod) && pod.DeletionTimestamp == nil {
		if err := p.c.SyncMirrorPod(ctx, pod); err != nil {
			p.log.Warn("mirror pod not in step", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}
	p.c.SetPodStatus(pod, st)
}

// PodGone tells the API server that a pod stopped for good: an API pod's
// deletion is finished, a static pod's mirror is removed. In the
// background.
func (p *Publisher) PodGone(ctx context.Context, pod *v1.Pod) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		var err error
		switch {
		case podspec.IsStatic(pod):
			err = p.c.DeleteMirrorPod(ctx, pod)
		case pod.Annotations[podspec.AnnotationConfigSource] == SourceAPI:
			err = p.c.FinalizeDeletion(ctx, pod)
		}
		if err != nil {
			p.log.Warn("telling the API server a pod is gone failed", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}()
}

// CleanupMirrors deletes mirror pods whose static pod is not in static
// (removed while the agent was down, or a mirror of another version left
// when its static pod went). In the background; a call while the last
// one still runs (an API server slow to answer) is dropped, as the next
// housekeeping calls again.
func (p *Publisher) CleanupMirrors(ctx context.Context, static []*v1.Pod) {
	if !p.cleaning.CompareAndSwap(false, true) {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.cleaning.Store(false)
		if err := p.c.CleanupMirrorPods(ctx, static); err != nil {
			p.log.Warn("cleaning up mirror pods failed", "err", err)
		}
	}()
}

// Wait waits for the background requests (end their context first).
func (p *Publisher) Wait() { p.wg.Wait() }
