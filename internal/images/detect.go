package images

import (
	"context"
	"fmt"
	"time"
)

// detect lists the runtime's images and containers and brings the
// records up to date at now: new images are first detected now (or at
// "unknown, in the past" on the very first detection after a start with
// no saved state for them), images used by a container or marked in use
// were last used now, and vanished images are forgotten. It returns the
// GC candidates.
func (g *GC) detect(ctx context.Context, now time.Time) ([]*Candidate, error) {
	imgs, err := g.deps.Images.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	ctrs, err := g.deps.Containers.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	inUse := refSet{}
	for _, c := range ctrs {
		inUse.add(c.GetImage().GetImage())
		inUse.add(c.GetImageRef())
		inUse.add(c.GetImageId())
	}
	pending := g.pendingSet()

	g.mu.Lock()
	var firstDetected time.Time // zero: the kubelet's "unknown, in the past"
	if g.initialized {
		firstDetected = now
	}
	changed := false
	g.generation++
	cands := make([]*Candidate, 0, len(imgs))
	for _, img := range imgs {
		id := img.GetId()
		rec, ok := g.records[id]
		if !ok {
			rec = &record{ImageRecord: ImageRecord{ID: id, FirstDetected: firstDetected}}
			g.records[id] = rec
			changed = true
		}
		rec.generation = g.generation
		rec.setNames(img.GetRepoTags(), img.GetRepoDigests())
		used := inUse.hasAny(rec.keys) || pending.hasAny(rec.keys)
		if used {
			rec.LastUsed = now
			g.dirty = true
		}
		rec.Size = int64(img.GetSize())
		rec.Pinned = img.GetPinned()
		cands = append(cands, &Candidate{
			ID: id, Size: rec.Size, FirstDetected: rec.FirstDetected, LastUsed: rec.LastUsed,
			Pinned: rec.Pinned, InUse: used,
		})
	}
	for id, rec := range g.records {
		if rec.generation != g.generation {
			delete(g.records, id)
			changed = true
		}
	}
	g.initialized = true
	g.dirty = g.dirty || changed
	var snapshot map[string]persistedImage
	if g.dirty && g.cfg.StateDir != "" && (changed || now.Sub(g.lastSave) >= g.cfg.Period) {
		snapshot = make(map[string]persistedImage, len(g.records))
		for id, r := range g.records {
			snapshot[id] = persistedImage{FirstDetected: r.FirstDetected, LastUsed: r.LastUsed}
		}
		g.dirty, g.lastSave = false, now
	}
	g.mu.Unlock()

	if snapshot != nil {
		if err := saveState(g.cfg.StateDir, snapshot); err != nil {
			g.log.Warn("could not save image GC state", "err", err)
		}
	}
	return cands, nil
}
