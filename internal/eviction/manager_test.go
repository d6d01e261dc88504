package eviction

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events/eventstest"
)

// fakeStats is a stats source the test sets directly; the real one is
// tested in hoststats_test.go.
type fakeStats struct {
	mu    sync.Mutex
	obs   Observations
	usage map[types.UID]PodUsage
}

func (f *fakeStats) set(sig Signal, avail, capacity int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.obs[sig] = Observation{Available: avail, Capacity: capacity}
}

func (f *fakeStats) NodeObservations(context.Context) (Observations, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := Observations{}
	for k, v := range f.obs {
		out[k] = v
	}
	return out, nil
}

func (f *fakeStats) PodUsage(context.Context, []*v1.Pod) (map[types.UID]PodUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.usage, nil
}

type killed struct {
	pod    *v1.Pod
	status v1.PodStatus
	grace  int64
}

type env struct {
	stats    *fakeStats
	clock    *testclock.FakeClock
	rec      *eventstest.Recorder
	m        *Manager
	mu       sync.Mutex
	pods     []*v1.Pod
	kills    []killed
	reclaims []string
	onImages func() // what deleting unused images does to the stats
	killErr  map[string]error
}

func defaultHard() []Threshold {
	return []Threshold{
		hard(SignalMemoryAvailable, "100Mi"),
		hardPct(SignalNodeFsAvailable, 0.1),
		hardPct(SignalNodeFsInodesFree, 0.05),
		hardPct(SignalImageFsAvailable, 0.15),
	}
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{stats: &fakeStats{obs: Observations{}}, clock: testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		rec: &eventstest.Recorder{}, killErr: map[string]error{}}
	e.healthy()
	reclaim := ReclaimFuncs{
		Containers: func(context.Context) error { e.note("containers"); return nil },
		Images: func(context.Context) (int64, error) {
			e.note("images")
			if e.onImages != nil {
				e.onImages()
			}
			return 0, nil
		},
	}
	m, err := New(cfg, Deps{
		Stats: e.stats, Reclaimer: reclaim, Recorder: e.rec, Clock: e.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ActivePods: func() []*v1.Pod {
			e.mu.Lock()
			defer e.mu.Unlock()
			return slices.Clone(e.pods)
		},
		KillPod: func(pod *v1.Pod, st v1.PodStatus, grace int64) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if err := e.killErr[pod.Name]; err != nil {
				return err
			}
			e.kills = append(e.kills, killed{pod, st, grace})
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	return e
}

func (e *env) note(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reclaims = append(e.reclaims, s)
}

func (e *env) healthy() {
	e.stats.set(SignalMemoryAvailable, 4096*mi, 8192*mi)
	e.stats.set(SignalNodeFsAvailable, 50*1024*mi, 100*1024*mi)
	e.stats.set(SignalNodeFsInodesFree, 900000, 1000000)
	e.stats.set(SignalImageFsAvailable, 50*1024*mi, 100*1024*mi)
	e.stats.set(SignalPIDAvailable, 30000, 32768)
}

func (e *env) sync(t *testing.T) {
	t.Helper()
	if err := e.m.synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (e *env) killedNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []string{}
	for _, k := range e.kills {
		out = append(out, k.pod.Name)
	}
	return out
}

func (e *env) remove(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pods = slices.DeleteFunc(e.pods, func(p *v1.Pod) bool { return p.Name == name })
}

func TestNewRejectsBadConfig(t *testing.T) {
	deps := Deps{Stats: &fakeStats{}, KillPod: func(*v1.Pod, v1.PodStatus, int64) error { return nil }, ActivePods: func() []*v1.Pod { return nil }}
	soft := hard(SignalMemoryAvailable, "1Gi") // a soft threshold without grace period
	for _, cfg := range []Config{{Soft: []Threshold{soft}}, {Hard: []Threshold{hard("bogus.signal", "1")}}} {
		if _, err := New(cfg, deps); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want InvalidArgument", cfg, err)
		}
	}
	if _, err := New(Config{}, Deps{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New without deps = %v", err)
	}
}

func TestMemoryPressureEvictsOnePodPerPass(t *testing.T) {
	e := newEnv(t, Config{Hard: defaultHard()})
	guaranteed := mkPod("guaranteed", 0, "200Mi")
	guaranteed.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("200Mi"), v1.ResourceCPU: resource.MustParse("1")}
	guaranteed.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("1")
	e.pods = []*v1.Pod{guaranteed, mkPod("hog", 0, "100Mi"), mkPod("idle", 0, "")}
	e.stats.usage = map[types.UID]PodUsage{
		"uid-guaranteed": {Memory: 150 * mi, Containers: map[string]int64{"app": 150 * mi}},
		"uid-hog":        {Memory: 700 * mi, Containers: map[string]int64{"app": 700 * mi}},
		"uid-idle":       {Memory: 5 * mi, Containers: map[string]int64{"app": 5 * mi}},
	}
	e.sync(t)
	if mem, disk, pid := e.m.Conditions(); mem || disk || pid || len(e.killedNames()) != 0 {
		t.Fatalf("healthy node: conditions %v %v %v, kills %v", mem, disk, pid, e.killedNames())
	}

	e.stats.set(SignalMemoryAvailable, 50*mi, 8192*mi)
	e.sync(t)
	if mem, _, _ := e.m.Conditions(); !mem {
		t.Fatal("no MemoryPressure below memory.available<100Mi")
	}
	if got := e.killedNames(); !slices.Equal(got, []string{"hog"}) {
		t.Fatalf("evicted %v, want only the pod furthest over its request", got)
	}
	k := e.kills[0]
	wantMsg := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
		"Container app was using 700Mi, request is 100Mi, has larger consumption of memory. "
	if k.status.Phase != v1.PodFailed || k.status.Reason != "Evicted" || k.status.Message != wantMsg || k.grace != 1 {
		t.Fatalf("eviction status %+v grace %d", k.status, k.grace)
	}
	if len(e.reclaims) != 0 {
		t.Fatalf("memory pressure ran disk reclaim: %v", e.reclaims)
	}
	if !e.rec.Has("Warning Evicted "+wantMsg) || !e.rec.Has("Warning EvictionThresholdMet Attempting to reclaim memory") {
		t.Fatalf("events: %v", e.rec.Events())
	}

	// The evicted pod is still shutting down: wait for it rather than
	// evicting another.
	e.clock.Step(10 * time.Second)
	e.sync(t)
	if got := e.killedNames(); len(got) != 1 {
		t.Fatalf("evicted %v while the first eviction was still in progress", got)
	}
	e.remove("hog")
	e.clock.Step(10 * time.Second)
	e.sync(t)
	// idle is BestEffort using 5Mi (over its zero request), guaranteed is
	// under its request.
	if got := e.killedNames(); !slices.Equal(got, []string{"hog", "idle"}) {
		t.Fatalf("evicted %v, want hog then idle", got)
	}
}

func TestPressureConditionTransitionPeriod(t *testing.T) {
	e := newEnv(t, Config{Hard: defaultHard(), PressureTransitionPeriod: 5 * time.Minute})
	e.stats.set(SignalPIDAvailable, 10, 32768)
	e.m.cfg.Hard = append(e.m.cfg.Hard, hard(SignalPIDAvailable, "1000"))
	e.sync(t)
	if _, _, pid := e.m.Conditions(); !pid {
		t.Fatal("no PIDPressure")
	}
	e.healthy()
	e.clock.Step(4 * time.Minute)
	e.sync(t)
	if _, _, pid := e.m.Conditions(); !pid {
		t.Fatal("PIDPressure cleared before the transition period")
	}
	e.clock.Step(time.Minute)
	e.sync(t)
	if _, _, pid := e.m.Conditions(); pid {
		t.Fatal("PIDPressure still set after the transition period")
	}
}

func TestDiskPressureReclaimsNodeFirst(t *testing.T) {
	e := newEnv(t, Config{Hard: defaultHard()})
	e.pods = []*v1.Pod{mkPod("a", 0, "")}
	e.stats.set(SignalImageFsAvailable, 10*1024*mi, 100*1024*mi)
	e.onImages = func() { e.stats.set(SignalImageFsAvailable, 40*1024*mi, 100*1024*mi) }
	e.sync(t)
	if !slices.Equal(e.reclaims, []string{"containers", "images"}) {
		t.Fatalf("reclaim steps %v, want dead containers then unused images", e.reclaims)
	}
	if got := e.killedNames(); len(got) != 0 {
		t.Fatalf("evicted %v although node reclaim freed enough", got)
	}
	if _, disk, _ := e.m.Conditions(); !disk {
		t.Fatal("no DiskPressure")
	}
	// Under disk pressure nothing is admitted, not even Guaranteed pods.
	ok, reason, msg := e.m.Admit(mkPod("new", 0, "1Gi"))
	if ok || reason != "Evicted" || msg != "The node had condition: [DiskPressure]. " {
		t.Fatalf("Admit = %v %q %q", ok, reason, msg)
	}
}

func TestDiskPressureEvictsWhenReclaimIsNotEnough(t *testing.T) {
	e := newEnv(t, Config{Hard: defaultHard()})
	crit := mkPod("critical", 2000000000, "")
	e.pods = []*v1.Pod{crit, mkPod("writer", 0, ""), mkPod("quiet", 0, "")}
	e.stats.usage = map[types.UID]PodUsage{"uid-critical": {Disk: 9000 * mi}, "uid-writer": {Disk: 800 * mi}, "uid-quiet": {Disk: mi}}
	e.killErr["writer"] = errors.New("runtime unavailable")
	e.stats.set(SignalNodeFsAvailable, 5*1024*mi, 100*1024*mi)
	e.sync(t)
	if !slices.Equal(e.reclaims, []string{"containers", "images"}) {
		t.Fatalf("reclaim steps %v", e.reclaims)
	}
	// critical is never evicted; writer's kill failed, so quiet goes.
	if got := e.killedNames(); !slices.Equal(got, []string{"quiet"}) {
		t.Fatalf("evicted %v, want quiet (critical spared, writer's kill failed)", got)
	}
	want := "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 5Gi. "
	if e.kills[0].status.Message != want {
		t.Fatalf("message %q, want %q", e.kills[0].status.Message, want)
	}
}

func TestSoftThresholdWaitsForGracePeriod(t *testing.T) {
	soft := hard(SignalMemoryAvailable, "1Gi")
	soft.GracePeriod = time.Minute
	e := newEnv(t, Config{Hard: defaultHard(), Soft: []Threshold{soft}, MaxPodGracePeriod: 20 * time.Second})
	p := mkPod("slow", 0, "")
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	*p.Spec.TerminationGracePeriodSeconds = 60
	e.pods = []*v1.Pod{p}
	e.stats.set(SignalMemoryAvailable, 512*mi, 8192*mi)
	e.sync(t)
	if mem, _, _ := e.m.Conditions(); !mem || len(e.killedNames()) != 0 {
		t.Fatalf("during the grace period: memory pressure %v (want true), kills %v (want none)", mem, e.killedNames())
	}
	e.clock.Step(time.Minute)
	e.sync(t)
	if got := e.killedNames(); !slices.Equal(got, []string{"slow"}) || e.kills[0].grace != 20 {
		t.Fatalf("after the grace period: kills %v (grace %v), want slow with min(20s, 60s)", got, e.kills)
	}
}

func TestMinReclaimKeepsEvicting(t *testing.T) {
	th := hard(SignalMemoryAvailable, "100Mi")
	th.MinReclaim = &ThresholdValue{Quantity: qty("200Mi")}
	e := newEnv(t, Config{Hard: []Threshold{th}})
	e.pods = []*v1.Pod{mkPod("a", 0, ""), mkPod("b", 1, "")}
	e.stats.set(SignalMemoryAvailable, 50*mi, 8192*mi)
	e.sync(t)
	e.remove("a")
	e.stats.set(SignalMemoryAvailable, 150*mi, 8192*mi) // above 100Mi, below 100Mi+200Mi
	e.clock.Step(10 * time.Second)
	e.sync(t)
	if got := e.killedNames(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("evicted %v; min reclaim should have kept evicting until 300Mi is available", got)
	}
}

func TestAdmitUnderMemoryPressure(t *testing.T) {
	e := newEnv(t, Config{Hard: defaultHard()})
	e.stats.set(SignalMemoryAvailable, 10*mi, 8192*mi)
	e.sync(t)
	bestEffort := mkPod("be", 0, "")
	if ok, reason, msg := e.m.Admit(bestEffort); ok || reason != "Evicted" || msg != "The node had condition: [MemoryPressure]. " {
		t.Fatalf("BestEffort admitted under memory pressure: %v %q %q", ok, reason, msg)
	}
	if ok, _, _ := e.m.Admit(mkPod("burstable", 0, "10Mi")); !ok {
		t.Fatal("Burstable pod refused under memory pressure alone")
	}
	tolerant := mkPod("tolerant", 0, "")
	tolerant.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	if ok, _, _ := e.m.Admit(tolerant); !ok {
		t.Fatal("BestEffort pod tolerating memory pressure refused")
	}
	if ok, _, _ := e.m.Admit(mkPod("critical", 2000000001, "")); !ok {
		t.Fatal("critical pod refused")
	}
}

func TestRunObservesEveryInterval(t *testing.T) {
	e := newEnv(t, Config{Hard: defaultHard(), MonitoringInterval: 10 * time.Second})
	e.pods = []*v1.Pod{mkPod("a", 0, "")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for !e.clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("Run never waited for its next interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.stats.set(SignalMemoryAvailable, mi, 8192*mi)
	e.clock.Step(10 * time.Second)
	for len(e.killedNames()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no eviction one interval after memory ran out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dedicatedStats is fakeStats on a node with its own image filesystem.
type dedicatedStats struct{ *fakeStats }

func (dedicatedStats) DedicatedImageFs() bool { return true }

func TestNodeFsPressureWithDedicatedImageFsSkipsImageReclaim(t *testing.T) {
	e := newEnv(t, Config{Hard: defaultHard()})
	e.m.deps.Stats = dedicatedStats{e.stats}
	e.pods = []*v1.Pod{mkPod("a", 0, "")}
	e.stats.set(SignalNodeFsAvailable, 5*1024*mi, 100*1024*mi)
	e.sync(t)
	if len(e.reclaims) != 0 || !slices.Equal(e.killedNames(), []string{"a"}) {
		t.Fatalf("reclaims %v kills %v: deleting images cannot help the node fs when images live elsewhere", e.reclaims, e.killedNames())
	}
	e.remove("a")
	e.healthy()
	e.stats.set(SignalImageFsAvailable, 5*1024*mi, 100*1024*mi)
	e.clock.Step(10 * time.Second)
	e.sync(t)
	if !slices.Equal(e.reclaims, []string{"containers", "images"}) {
		t.Fatalf("image fs pressure reclaims %v, want containers then images", e.reclaims)
	}
}
