package images

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events/eventstest"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

type env struct {
	rt    *fakeRuntime
	rec   *eventstest.Recorder
	clock *testclock.FakeClock
	gc    *GC
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{rt: newFakeRuntime(), rec: &eventstest.Recorder{}, clock: testclock.NewFakeClock(t0)}
	e.rt.capacity = 1000
	e.gc = e.newGC(t, cfg)
	return e
}

func (e *env) newGC(t *testing.T, cfg Config) *GC {
	t.Helper()
	g, err := NewGC(cfg, Deps{Images: e.rt, Containers: e.rt, Disk: e.rt, Recorder: e.rec, Clock: e.clock, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func defaultPolicy() Policy {
	return Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}
}

func TestNewGCRejectsBadConfig(t *testing.T) {
	deps := Deps{Images: newFakeRuntime(), Containers: newFakeRuntime(), Disk: newFakeRuntime()}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Policy: Policy{HighThresholdPercent: 70, LowThresholdPercent: 80}}, "LowThresholdPercent 80 can not be higher than HighThresholdPercent 70"},
		{Config{Policy: defaultPolicy(), Period: -time.Second}, "Period -1s must not be negative"},
		{Config{Policy: defaultPolicy(), DetectPeriod: -time.Second}, "DetectPeriod -1s must not be negative"},
	} {
		_, err := NewGC(tc.cfg, deps)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewGC(%+v) error = %v, want InvalidArgument with %q", tc.cfg, err, tc.want)
		}
	}
}

func TestGarbageCollectFreesLeastRecentlyUsedDownToLow(t *testing.T) {
	e := newEnv(t, Config{Policy: Policy{HighThresholdPercent: 85, LowThresholdPercent: 40, MinAge: 2 * time.Minute}})
	ctx := context.Background()
	e.rt.add(&fakeImage{id: "sha256:a", tags: []string{"docker.io/library/a:1"}, size: 200},
		&fakeImage{id: "sha256:b", tags: []string{"docker.io/library/b:1"}, size: 200},
		&fakeImage{id: "sha256:c", tags: []string{"docker.io/library/c:1"}, size: 200},
		&fakeImage{id: "sha256:d", tags: []string{"docker.io/library/d:1"}, size: 200})
	e.rt.run("b:1") // the pod spec's spelling
	if err := e.gc.GarbageCollect(ctx); err != nil {
		t.Fatal(err) // 80% used: under the high threshold
	}
	if r := e.rt.removedIDs(); len(r) != 0 {
		t.Fatalf("removed %v below the high threshold", r)
	}

	// b's container is gone; d is in use now; e was just pulled.
	e.rt.containers = nil
	e.rt.run("docker.io/library/d:1")
	e.clock.Step(10 * time.Minute)
	e.rt.add(&fakeImage{id: "sha256:e", tags: []string{"docker.io/library/e:1"}, size: 150})
	if err := e.gc.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	// 95% used, low 40%: free 550. a and c were never used, b was used
	// 10 minutes ago, d is in use and e is younger than the minimum age.
	if got := e.rt.removedIDs(); !slices.Equal(got, []string{"sha256:a", "sha256:c", "sha256:b"}) {
		t.Fatalf("removed %v, want a, c, then b", got)
	}
	if !e.rt.has("sha256:d") || !e.rt.has("sha256:e") {
		t.Fatal("an image in use or too young was removed")
	}
	if n := e.rec.Count(EventFreeDiskSpaceFailed); n != 0 {
		t.Fatalf("events:\n%s", e.rec)
	}
	recs := e.gc.Images()
	if len(recs) != 2 || recs[0].ID != "sha256:d" || !recs[0].LastUsed.Equal(t0.Add(10*time.Minute)) ||
		recs[1].ID != "sha256:e" || !recs[1].FirstDetected.Equal(t0.Add(10*time.Minute)) || recs[1].Size != 150 {
		t.Fatalf("Images() = %+v", recs)
	}
}

func TestFreeDiskSpaceFailed(t *testing.T) {
	e := newEnv(t, Config{Policy: defaultPolicy()})
	e.rt.add(&fakeImage{id: "sha256:big", tags: []string{"docker.io/library/big:1"}, size: 900},
		&fakeImage{id: "sha256:pinned", tags: []string{"docker.io/library/pause:1"}, size: 50, pinned: true})
	e.rt.run("big:1")
	err := e.gc.GarbageCollect(context.Background())
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("GarbageCollect = %v, want ResourceExhausted", err)
	}
	want := "Warning FreeDiskSpaceFailed Failed to garbage collect required amount of images. Attempted to free 150 bytes, but only found 0 bytes eligible to free."
	if e.rec.Count(want) != 1 {
		t.Fatalf("events:\n%s", e.rec)
	}
	if r := e.rt.removedIDs(); len(r) != 0 {
		t.Fatalf("removed %v", r)
	}
}

func TestInvalidDiskCapacity(t *testing.T) {
	e := newEnv(t, Config{Policy: defaultPolicy()})
	e.rt.capacity = 0
	if err := e.gc.GarbageCollect(context.Background()); err == nil {
		t.Fatal("GarbageCollect succeeded with zero capacity")
	}
	if e.rec.Count("Warning InvalidDiskCapacity invalid capacity 0 on image filesystem") != 1 {
		t.Fatalf("events:\n%s", e.rec)
	}
}

func TestImageGCFailedOnlyOnRepeatedFailure(t *testing.T) {
	e := newEnv(t, Config{Policy: defaultPolicy()})
	ctx := context.Background()
	e.rt.listErr = errors.New("runtime down")
	failed := e.gc.collectOnce(ctx, false)
	if !failed || e.rec.Count(EventImageGCFailed) != 0 {
		t.Fatalf("first failure: failed=%v events:\n%s", failed, e.rec)
	}
	failed = e.gc.collectOnce(ctx, failed)
	if !failed || e.rec.Count("Warning ImageGCFailed list images: runtime down") != 1 {
		t.Fatalf("second failure: failed=%v events:\n%s", failed, e.rec)
	}
	e.rt.listErr = nil
	if e.gc.collectOnce(ctx, failed) {
		t.Fatal("a good pass still counts as failed")
	}
	e.rt.listErr = errors.New("runtime down")
	if e.gc.collectOnce(ctx, false); e.rec.Count(EventImageGCFailed) != 1 {
		t.Fatalf("a failure after a success made an event:\n%s", e.rec)
	}
}

func TestRemovalErrorsAreReportedAndOthersStillGo(t *testing.T) {
	e := newEnv(t, Config{Policy: defaultPolicy()})
	e.rt.add(&fakeImage{id: "sha256:a", size: 400}, &fakeImage{id: "sha256:b", size: 500})
	e.rt.removeErr["sha256:a"] = errors.New("image is busy")
	err := e.gc.GarbageCollect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "image is busy") {
		t.Fatalf("GarbageCollect = %v", err)
	}
	if got := e.rt.removedIDs(); !slices.Equal(got, []string{"sha256:b"}) {
		t.Fatalf("removed %v, want b despite a's error", got)
	}
}

func TestMarkInUseProtectsAnImageAboutToStart(t *testing.T) {
	e := newEnv(t, Config{Policy: defaultPolicy()})
	ctx := context.Background()
	e.rt.add(&fakeImage{id: "sha256:bb", tags: []string{"docker.io/library/busybox:latest"}, size: 950})
	release := e.gc.MarkInUse("busybox") // a pod was admitted with image "busybox"
	if err := e.gc.GarbageCollect(ctx); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("GarbageCollect = %v; the only image is pending, nothing can be freed", err)
	}
	if freed, err := e.gc.DeleteUnusedImages(ctx); err != nil || freed != 0 || !e.rt.has("sha256:bb") {
		t.Fatalf("DeleteUnusedImages removed a pending image: freed=%d err=%v", freed, err)
	}
	release()
	release() // idempotent
	e.clock.Step(time.Second)
	freed, err := e.gc.DeleteUnusedImages(ctx)
	if err != nil || freed != 950 || e.rt.has("sha256:bb") {
		t.Fatalf("after release: freed=%d err=%v", freed, err)
	}
}

func TestDeleteUnusedImagesRespectsMinAgeAndUse(t *testing.T) {
	e := newEnv(t, Config{Policy: Policy{HighThresholdPercent: 100, LowThresholdPercent: 100, MinAge: time.Hour}})
	ctx := context.Background()
	e.rt.add(&fakeImage{id: "sha256:old", size: 10}, &fakeImage{id: "sha256:used", tags: []string{"docker.io/x/used:1"}, size: 20})
	e.rt.run("x/used:1")
	e.gc.refresh(ctx)
	e.rt.add(&fakeImage{id: "sha256:young", size: 30})
	freed, err := e.gc.DeleteUnusedImages(ctx)
	if err != nil || freed != 10 || !slices.Equal(e.rt.removedIDs(), []string{"sha256:old"}) {
		t.Fatalf("freed=%d err=%v removed=%v; want only the old unused image (GC disabled does not stop reclaim)", freed, err, e.rt.removedIDs())
	}
}

func TestMaxAgeRemovesStaleImagesBelowThreshold(t *testing.T) {
	e := newEnv(t, Config{Policy: Policy{HighThresholdPercent: 100, LowThresholdPercent: 80, MinAge: time.Minute, MaxAge: time.Hour}})
	ctx := context.Background()
	e.rt.add(&fakeImage{id: "sha256:stale", tags: []string{"docker.io/library/stale:1"}, size: 10},
		&fakeImage{id: "sha256:busy", tags: []string{"docker.io/library/busy:1"}, size: 10})
	e.rt.run("busy:1")
	e.rt.run("stale:1")
	if err := e.gc.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	e.rt.containers = nil
	e.rt.run("busy:1")
	e.clock.Step(61 * time.Minute)
	if err := e.gc.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.rt.removedIDs(); !slices.Equal(got, []string{"sha256:stale"}) {
		t.Fatalf("removed %v, want the image unused for over an hour", got)
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Policy: Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour}, StateDir: dir}
	e := newEnv(t, cfg)
	ctx := context.Background()
	e.gc.refresh(ctx) // the first detection after the very first start
	e.rt.add(&fakeImage{id: "sha256:new", size: 900})
	e.clock.Step(time.Minute)
	e.gc.refresh(ctx)
	pulledAt := t0.Add(time.Minute)

	// The agent restarts ten minutes later; the image is still young.
	e.clock.Step(10 * time.Minute)
	g2 := e.newGC(t, cfg)
	if err := g2.GarbageCollect(ctx); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("GarbageCollect after restart = %v", err)
	}
	if e.rt.has("sha256:new") == false {
		t.Fatal("restart forgot when the image was pulled and removed it before its minimum age")
	}
	recs := g2.Images()
	if len(recs) != 1 || !recs[0].FirstDetected.Equal(pulledAt) {
		t.Fatalf("Images() after restart = %+v, want firstDetected %v", recs, pulledAt)
	}
}

func TestRunCollectsAtStartAndEveryPeriod(t *testing.T) {
	e := newEnv(t, Config{Policy: Policy{HighThresholdPercent: 85, LowThresholdPercent: 80}, Period: 5 * time.Minute, DetectPeriod: 30 * time.Second})
	e.rt.add(&fakeImage{id: "sha256:a", size: 900})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.gc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(30 * time.Second)
	for !e.clock.HasWaiters() || e.rt.has("sha256:a") {
		if time.Now().After(deadline) {
			t.Fatal("Run did not collect at start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.rt.add(&fakeImage{id: "sha256:b", size: 900})
	e.clock.Step(5 * time.Minute)
	for e.rt.has("sha256:b") {
		if time.Now().After(deadline) {
			t.Fatal("no GC pass one period later")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
