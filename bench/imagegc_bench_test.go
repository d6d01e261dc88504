package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/images"
)

const gcBenchImages = 10000

// BenchmarkImageGCDecide times the GC decision for 10,000 images on a
// full disk, every one of them removable, so the whole LRU order is
// computed (target: under 20 ms per decision).
func BenchmarkImageGCDecide(b *testing.B) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := images.Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: 24 * time.Hour}
	cands := make([]*images.Candidate, gcBenchImages)
	for i := range cands {
		cands[i] = &images.Candidate{
			ID:            fmt.Sprintf("sha256:%064x", i*7919%gcBenchImages),
			Size:          int64(1<<20 + i),
			FirstDetected: now.Add(-time.Duration(i%977) * time.Hour),
			LastUsed:      now.Add(-time.Duration(i%613) * time.Minute),
			Pinned:        i%500 == 0,
			InUse:         i%50 == 0,
		}
	}
	disk := images.DiskUsage{Capacity: 1 << 40, Available: 1 << 36}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		plan := images.Decide(p, cands, disk, now, now.Add(-48*time.Hour))
		if len(plan.ByLRU) == 0 {
			b.Fatal("nothing to remove")
		}
	}
}

// benchRuntime lists a fixed set of images and containers and removes
// nothing: the pass below measures detection plus decision.
type benchRuntime struct {
	imgs []*runtimeapi.Image
	ctrs []*runtimeapi.Container
}

func (r *benchRuntime) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return r.imgs, nil
}
func (r *benchRuntime) RemoveImage(context.Context, *runtimeapi.ImageSpec) error { return nil }
func (r *benchRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return r.ctrs, nil
}
func (r *benchRuntime) ImageFsStats(context.Context) (images.FsStats, error) {
	return images.FsStats{Capacity: 1 << 40, Available: 1 << 39}, nil
}

// BenchmarkImageGCPass times a whole GarbageCollect pass over 10,000
// images and 1,000 containers (list, match images in use, update the
// records, decide) with the disk under the threshold.
func BenchmarkImageGCPass(b *testing.B) {
	rt := &benchRuntime{}
	for i := range gcBenchImages {
		rt.imgs = append(rt.imgs, &runtimeapi.Image{
			Id:       fmt.Sprintf("sha256:%064x", i),
			RepoTags: []string{fmt.Sprintf("registry.local/team%d/app%d:v%d", i%37, i, i%5)},
			Size:     uint64(1<<20 + i),
		})
	}
	for i := range 1000 {
		ref := fmt.Sprintf("registry.local/team%d/app%d:v%d", (i*10)%37, i*10, (i*10)%5)
		rt.ctrs = append(rt.ctrs, &runtimeapi.Container{Id: fmt.Sprint(i), Image: &runtimeapi.ImageSpec{Image: ref}, ImageRef: ref})
	}
	g, err := images.NewGC(images.Config{Policy: images.Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}},
		images.Deps{Images: rt, Containers: rt, Disk: rt, Clock: testclock.NewFakeClock(time.Now()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := g.GarbageCollect(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
