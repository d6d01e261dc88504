package agent

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/eviction"
	"github.com/minilet/minilet/internal/images"
	"github.com/minilet/minilet/internal/server"
)

// startImageGC runs image garbage collection over the runtime's images.
func (a *Agent) startImageGC(ctx context.Context, wg *sync.WaitGroup) error {
	gc, err := images.NewGC(imageGCConfig(a.cfg), images.Deps{
		Images: a.cri, Containers: a.cri, Disk: images.StatfsDisk{Runtime: a.cri},
		Recorder: a.recorder, Node: a.nodeRef(), Clock: a.clock, Logger: a.log,
	})
	if err != nil {
		return fmt.Errorf("image garbage collection: %w", err)
	}
	a.imageGC = gc
	wg.Add(1)
	go func() { defer wg.Done(); gc.Run(ctx) }()
	return nil
}

// startEviction watches memory, disk and PIDs, reclaims node resources and
// evicts pods when thresholds are crossed.
func (a *Agent) startEviction(ctx context.Context, wg *sync.WaitGroup) error {
	stats, err := eviction.NewHostStats(eviction.HostStatsConfig{
		RootDir:  a.cfg.RootDir,
		PodUsage: eviction.SummaryPodUsage(a.cm.Summary),
	})
	if err != nil {
		return fmt.Errorf("eviction stats: %w", err)
	}
	m, err := eviction.New(evictionConfig(a.cfg), eviction.Deps{
		Stats: stats,
		Reclaimer: eviction.ReclaimFuncs{
			Containers: func(ctx context.Context) error {
				// Keep the last dead container of live pods (restart
				// counts and back-off live there); until every source
				// was read, every pod counts as alive.
				return a.runtime.GarbageCollect(ctx, 1, func(uid types.UID) bool {
					if !a.sourcesReady.Load() {
						return false
					}
					_, known := a.pods.pod(uid)
					return !known
				})
			},
			Images: a.imageGC.DeleteUnusedImages,
		},
		KillPod:    a.evictPod,
		ActivePods: a.pods.active,
		Recorder:   a.recorder,
		Node:       a.nodeRef(),
		Clock:      a.clock,
		Logger:     a.log,
	})
	if err != nil {
		return fmt.Errorf("eviction: %w", err)
	}
	a.eviction = m
	wg.Add(1)
	go func() { defer wg.Done(); m.Run(ctx) }()
	return nil
}

// evictPod stops a pod the eviction manager chose, leaving it Failed with
// reason Evicted.
func (a *Agent) evictPod(pod *v1.Pod, st v1.PodStatus, grace int64) error {
	a.pods.setFinal(pod.UID, st)
	a.workers.KillPod(pod, &grace)
	return nil
}

// Images lists the runtime's images now, with what image GC knows of
// them (first detected, last used).
func (a *Agent) Images(ctx context.Context) ([]server.Image, error) {
	list, err := a.cri.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	known := map[string]images.ImageRecord{}
	for _, r := range a.imageGC.Images() {
		known[r.ID] = r
	}
	out := make([]server.Image, 0, len(list))
	for _, img := range list {
		r := known[img.Id]
		out = append(out, server.Image{
			ID: img.Id, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Size: img.Size,
			Pinned: img.Pinned, FirstDetected: r.FirstDetected, LastUsed: r.LastUsed,
		})
	}
	return out, nil
}
