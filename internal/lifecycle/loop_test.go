package lifecycle

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/pleg"
	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/podworkers"
)

func int64p(v int64) *int64 { return &v }

// TestTerminationWithGrace covers every way a running pod is stopped: the
// grace period it is stopped with and the phase it ends in.
func TestTerminationWithGrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stop  func(h *harness, pod *v1.Pod)
		grace *int64 // what the runtime is asked for (nil: the pod's own)
		phase v1.PodPhase
	}{
		// A static pod whose manifest went keeps its last phase: it is
		// shown by its deletion timestamp until it is forgotten.
		{"manifest removed", func(h *harness, _ *v1.Pod) { h.snapshot(podspec.SourceFile) }, nil, v1.PodRunning},
		{"deleted in the API server with 7s", func(h *harness, pod *v1.Pod) {
			del := pod.DeepCopy()
			now := metav1.NewTime(h.clk.Now())
			del.DeletionTimestamp, del.DeletionGracePeriodSeconds = &now, int64p(7)
			h.snapshot("api", del)
		}, int64p(7), v1.PodFailed},
		{"evicted", func(h *harness, pod *v1.Pod) {
			evicted := v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}
			if err := Evict(h.pods, h.workers)(pod, evicted, 0); err != nil {
				t.Fatal(err)
			}
			h.workers.step(t)
		}, int64p(0), v1.PodFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, withSources(podspec.SourceFile, "api"))
			var pod *v1.Pod
			if tc.name == "deleted in the API server with 7s" {
				pod = apiPod("u1", "web", "app")
				h.snapshot("api", pod)
			} else {
				pod = filePod("u1", "web", v1.RestartPolicyAlways, "app")
				h.snapshot(podspec.SourceFile, pod)
			}
			tc.stop(h, pod)
			if len(h.rt.kills) != 1 {
				t.Fatalf("runtime kills = %d, want 1", len(h.rt.kills))
			}
			if got := h.rt.kills[0].grace; (got == nil) != (tc.grace == nil) || got != nil && *got != *tc.grace {
				t.Fatalf("grace = %v, want %v", got, tc.grace)
			}
			st := h.status(pod)
			if st.Phase != tc.phase {
				t.Fatalf("phase = %s, want %s", st.Phase, tc.phase)
			}
			if tc.name == "evicted" && (st.Reason != "Evicted" || st.ContainerStatuses[0].State.Terminated == nil) {
				t.Fatalf("evicted status = %+v, want reason Evicted with the containers as they ended", st)
			}
			if len(h.prober.stopped) != 1 || len(h.cgroups.removed) != 1 {
				t.Fatalf("probes stopped %v, cgroups removed %v: want both once", h.prober.stopped, h.cgroups.removed)
			}
		})
	}
}

// TestStoppedPodPhase: a pod stopped for good ends Succeeded only when
// every app container exited 0; a deleted static pod keeps its phase (it
// is shown by its deletion timestamp, as the kubelet shows it).
func TestStoppedPodPhase(t *testing.T) {
	exited := func(code int32) v1.ContainerStatus {
		return v1.ContainerStatus{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
	}
	for _, tc := range []struct {
		name string
		cs   []v1.ContainerStatus
		want v1.PodPhase
	}{
		{"all exited 0", []v1.ContainerStatus{exited(0), exited(0)}, v1.PodSucceeded},
		{"one exited 143", []v1.ContainerStatus{exited(0), exited(143)}, v1.PodFailed},
		{"one never ran", []v1.ContainerStatus{exited(0), {}}, v1.PodFailed},
		{"no containers", nil, v1.PodFailed},
	} {
		if got := stoppedPhase(v1.PodStatus{ContainerStatuses: tc.cs}); got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}

	h := newHarness(t)
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod)
	del := pod.DeepCopy()
	now := metav1.NewTime(h.clk.Now())
	del.DeletionTimestamp = &now
	h.loop.cfg.Pods.markLeaving(del)
	h.workers.KillPod(del, nil)
	h.workers.step(t)
	if got := h.status(pod).Phase; got != v1.PodRunning {
		t.Errorf("a deleted static pod ends %s, want its last phase (Running)", got)
	}
}

// TestAdmission: pods are admitted oldest first against the pods already
// admitted; a rejected pod ends Failed with the rejecting admitter's
// reason and a Warning event, never runs, and what earlier admitters hold
// for it is released.
func TestAdmission(t *testing.T) {
	h := newHarness(t)
	old := filePod("u1", "old", v1.RestartPolicyAlways, "app")
	big := filePod("u2", "big", v1.RestartPolicyAlways, "app")
	big.CreationTimestamp = metav1.NewTime(t0.Add(time.Second))
	late := filePod("u3", "late", v1.RestartPolicyAlways, "app")
	late.CreationTimestamp = metav1.NewTime(t0.Add(2 * time.Second))
	h.admitters[1].reject["big"] = "OutOfcpu"

	h.snapshot(podspec.SourceFile, late, big, old) // any order in the snapshot
	if got := h.admitters[0].admitted; len(got) != 3 || got[0] != "old" || got[1] != "big" || got[2] != "late" {
		t.Fatalf("admission order = %v, want oldest first", got)
	}
	if seen := h.admitters[1].seen; len(seen[2]) != 1 || seen[2][0] != "old" {
		t.Fatalf("late was admitted against %v, want only old (big was rejected)", seen[2])
	}
	st := h.status(big)
	if st.Phase != v1.PodFailed || st.Reason != "OutOfcpu" || st.Message != "Pod was rejected: OutOfcpu by resources" {
		t.Fatalf("rejected status = %+v", st)
	}
	if !h.rec.Has("Warning OutOfcpu OutOfcpu by resources") {
		t.Fatalf("no rejection event: %v", h.rec.Events())
	}
	if pub := h.publisher.statuses["big"]; pub.Phase != v1.PodFailed || pub.Reason != "OutOfcpu" || pub.Message != st.Message {
		t.Fatalf("the API server was told %+v about the rejected pod, want it Failed with the reason", pub)
	}
	if got := h.admitters[0].released; len(got) != 1 || got[0] != big.UID {
		t.Fatalf("devices released for %v, want only the rejected pod", got)
	}
	if h.rt.attempts(big.UID, "app") != 0 {
		t.Fatal("a rejected pod ran")
	}
	h.event(big) // a runtime event for it changes nothing
	if h.rt.attempts(big.UID, "app") != 0 {
		t.Fatal("an event made a rejected pod run")
	}
	for _, p := range h.pods.Active() {
		if p.UID == big.UID {
			t.Fatal("a rejected pod counts as active")
		}
	}
	// Its manifest removed: forgotten at once, nothing to stop.
	h.snapshot(podspec.SourceFile, old, late)
	if _, ok := h.pods.Pod(big.UID); ok || len(h.rt.kills) != 0 {
		t.Fatal("a rejected pod was not simply forgotten")
	}
}

// TestAdoptionAfterRestart: an agent that restarts finds its pods' containers
// still running. It adopts them (no new container, no kill), starts from
// the statuses it saved (start time, readiness, restart count), and stops
// only what no source wants — once every source has spoken.
func TestAdoptionAfterRestart(t *testing.T) {
	first := newHarness(t, withSources(podspec.SourceFile, "api"))
	web := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	gone := filePod("u2", "gone", v1.RestartPolicyAlways, "app")
	first.snapshot(podspec.SourceFile, web, gone)
	first.snapshot("api")
	before := first.status(web)
	if before.Phase != v1.PodRunning || condition(before, v1.PodReady) != v1.ConditionTrue {
		t.Fatalf("setup: web is %s, Ready %s", before.Phase, condition(before, v1.PodReady))
	}
	// The agent stops; "gone" is deleted from the folder meanwhile.
	first.clk.Step(time.Minute)

	h := newHarness(t, restartedFrom(first), withSources(podspec.SourceFile, "api"))
	if st, ok := h.pods.GetPodStatus(web.UID); !ok || st.Phase != v1.PodRunning {
		t.Fatalf("before any sync, the API shows %+v: want the saved Running status (no flap)", st)
	}
	actions := len(h.rt.actions)
	h.snapshot(podspec.SourceFile, web)
	for _, a := range h.rt.actions[actions:] {
		if a.CreateSandbox || a.KillPod || len(a.ContainersToStart) > 0 || len(a.ContainersToKill) > 0 {
			t.Fatalf("adopting a running pod did %+v", a)
		}
	}
	after := h.status(web)
	if !after.StartTime.Equal(before.StartTime) || condition(after, v1.PodReady) != v1.ConditionTrue {
		t.Fatalf("adopted status lost its history: start %v → %v, Ready %s", before.StartTime, after.StartTime, condition(after, v1.PodReady))
	}

	h.housekeep()
	if len(h.rt.kills) != 0 {
		t.Fatal("an orphan was stopped before the API source had sent its pods")
	}
	h.snapshot("api")
	h.housekeep()
	if len(h.rt.kills) != 1 || h.rt.kills[0].uid != gone.UID {
		t.Fatalf("kills = %+v, want only the pod no source wants", h.rt.kills)
	}
	h.housekeep() // forgets the orphan once its worker finished
	if _, ok := h.workers.workers[gone.UID]; ok {
		t.Fatal("the orphan's worker was kept after it terminated")
	}
}

// TestRejectedAfterRestartIsStopped: a pod that ran before a restart but
// is rejected now (its resources are gone) has its leftover containers
// stopped, and ends with the rejection as its status.
func TestRejectedAfterRestartIsStopped(t *testing.T) {
	first := newHarness(t)
	gpu := filePod("u1", "gpu", v1.RestartPolicyAlways, "app")
	first.snapshot(podspec.SourceFile, gpu)

	h := newHarness(t, restartedFrom(first))
	h.admitters[0].reject["gpu"] = "UnexpectedAdmissionError"
	h.snapshot(podspec.SourceFile, gpu)
	h.housekeep()
	if len(h.rt.kills) != 1 || h.rt.kills[0].uid != gpu.UID {
		t.Fatalf("kills = %+v, want the rejected pod's leftovers stopped", h.rt.kills)
	}
	if st := h.status(gpu); st.Phase != v1.PodFailed || st.Reason != "UnexpectedAdmissionError" {
		t.Fatalf("status = %+v, want the rejection", st)
	}
}

// TestUpdatesAndReadd: a source resending the same pod causes no sync; a
// changed one does; a pod restored while it still terminates runs again
// once its old copy is gone; the cluster hears about pods gone for good.
func TestUpdatesAndReadd(t *testing.T) {
	h := newHarness(t)
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod)
	calls := len(h.workers.calls)
	h.snapshot(podspec.SourceFile, pod.DeepCopy())
	if len(h.workers.calls) != calls {
		t.Fatalf("an unchanged pod was synced again: %v", h.workers.calls[calls:])
	}
	changed := pod.DeepCopy()
	changed.Generation = 2
	h.snapshot(podspec.SourceFile, changed)
	if got := h.workers.calls[len(h.workers.calls)-1]; got != "update web" {
		t.Fatalf("a changed pod was not handed to its worker: %v", h.workers.calls[calls:])
	}

	// Removed, then restored before its worker reported the end.
	h.loop.HandleSnapshot(t.Context(), Snapshot{Source: podspec.SourceFile})
	h.loop.HandleSnapshot(t.Context(), Snapshot{Source: podspec.SourceFile, Pods: []*v1.Pod{pod}})
	h.workers.step(t)
	if len(h.rt.kills) != 1 || h.rt.pod(pod.UID).FindContainer("app").State == "running" || h.rt.attempts(pod.UID, "app") != 1 {
		t.Fatalf("the old copy was not stopped first (kills %v)", h.rt.kills)
	}
	h.loop.HandleTerminated(t.Context(), pod.UID)
	if len(h.publisher.gone) != 1 || h.publisher.gone[0] != "web" {
		t.Fatalf("cluster told of gone pods %v, want web", h.publisher.gone)
	}
	if got := h.admitters[0].released; len(got) != 1 || got[0] != pod.UID {
		t.Fatalf("released %v, want the old copy's resources", got)
	}
	if h.workers.workers[pod.UID] == nil || h.workers.workers[pod.UID].phase != podworkers.Syncing {
		t.Fatal("the restored pod did not get a new worker")
	}
	h.workers.step(t)
	if h.rt.attempts(pod.UID, "app") != 2 || h.rt.pod(pod.UID).FindContainer("app").State != "running" {
		t.Fatal("the restored pod does not run again")
	}
}

// TestHousekeepingPeriodic: garbage collection and orphaned cgroups run
// once a minute; probe cleanup, mirror cleanup and the gauges at every
// tick.
func TestHousekeepingPeriodic(t *testing.T) {
	h := newHarness(t)
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app", "side")
	h.snapshot(podspec.SourceFile, pod)
	h.housekeep()
	h.clk.Step(2 * time.Second)
	h.housekeep()
	if h.rt.gcRuns != 1 || h.cgroups.orphanRuns != 1 {
		t.Fatalf("within a minute: gc %d, cgroups %d; want 1 each", h.rt.gcRuns, h.cgroups.orphanRuns)
	}
	h.clk.Step(time.Minute)
	h.housekeep()
	if h.rt.gcRuns != 2 {
		t.Fatalf("gc runs %d after a minute, want 2", h.rt.gcRuns)
	}
	if len(h.prober.cleanups) != 3 || h.publisher.cleanups != 3 {
		t.Fatalf("probe cleanups %d, mirror cleanups %d; want one per tick", len(h.prober.cleanups), h.publisher.cleanups)
	}
	if h.metrics.running != 1 || h.metrics.counted["running"] != 2 {
		t.Fatalf("gauges: %d pods, %v containers; want 1 and 2 running", h.metrics.running, h.metrics.counted)
	}
	if len(h.metrics.starts) != 1 {
		t.Fatalf("start latency observed %d times, want once", len(h.metrics.starts))
	}
}

// TestSyncErrorsKeepStatus: a cgroup that cannot be made fails the sync
// (retried by the worker) without running anything.
func TestSyncErrorsKeepStatus(t *testing.T) {
	h := newHarness(t)
	h.cgroups.failEnsure = errTest
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod)
	if wk := h.workers.workers[pod.UID]; wk.lastErr == nil || h.rt.attempts(pod.UID, "app") != 0 {
		t.Fatalf("err %v, attempts %d: want a failed sync and nothing started", wk.lastErr, h.rt.attempts(pod.UID, "app"))
	}
	if st := h.status(pod); st.Phase != v1.PodPending {
		t.Fatalf("phase %s, want Pending", st.Phase)
	}
	h.cgroups.failEnsure = nil
	h.event(pod)
	if h.rt.attempts(pod.UID, "app") != 1 {
		t.Fatal("not started once the cgroup could be made")
	}
}

var errTest = errString("cgroup v1 hierarchy is read-only")

type errString string

func (e errString) Error() string { return string(e) }

// TestConstructorsNameMissingFields: a config missing a required
// dependency is refused with the field's name.
func TestConstructorsNameMissingFields(t *testing.T) {
	if _, err := NewSyncer(SyncerConfig{}); err == nil || err.Error() != "lifecycle syncer: field Pods is required" {
		t.Errorf("NewSyncer: %v", err)
	}
	if _, err := NewLoop(LoopConfig{Pods: NewPods(nil)}); err == nil || err.Error() != "lifecycle loop: field Workers is required" {
		t.Errorf("NewLoop: %v", err)
	}
}

// TestPodsNeverResurrectAForgottenPod: a late status write from a worker
// does not bring a forgotten pod back, in memory or on disk.
func TestPodsNeverResurrectAForgottenPod(t *testing.T) {
	store := newMemStore()
	s := NewPods(store)
	p := filePod("a", "web", v1.RestartPolicyAlways, "app")
	s.setDesired(p)
	s.setStatus(p.UID, v1.PodStatus{Phase: v1.PodRunning})
	s.forget(p.UID)
	s.setStatus(p.UID, v1.PodStatus{Phase: v1.PodRunning})
	if _, ok := s.GetPodStatus(p.UID); ok || len(s.List()) != 0 {
		t.Fatal("a late status write brought a forgotten pod back")
	}
	if _, ok := store.Restored(p.UID); ok {
		t.Fatal("a forgotten pod's status is still saved")
	}
}

// TestPodsLeavingAreListedButNotActive: a terminating pod shows in the API
// with its deletion timestamp but no longer uses the node; nor does a
// finished one. IsGone holds only once the sources were read.
func TestPodsLeavingAreListedButNotActive(t *testing.T) {
	s := NewPods(nil)
	web, job := filePod("a", "web", "", "app"), filePod("b", "job", "", "app")
	s.setDesired(web)
	s.setDesired(job)
	s.setStatus(job.UID, v1.PodStatus{Phase: v1.PodSucceeded})
	now := metav1.Now()
	leaving := web.DeepCopy()
	leaving.DeletionTimestamp = &now
	s.markLeaving(leaving)
	if got := s.Active(); len(got) != 0 {
		t.Errorf("active = %v: neither a leaving nor a finished pod uses the node", got)
	}
	list := s.List()
	if len(list) != 2 || list[1].Name != "web" || list[1].DeletionTimestamp == nil || list[1].Status.Phase != v1.PodPending {
		t.Errorf("list = %+v, want job and the terminating web", list)
	}
	if s.IsGone(types.UID("nobody")) {
		t.Error("a pod counts as gone before the sources were read")
	}
	s.markSourcesReady()
	if !s.IsGone(types.UID("nobody")) || s.IsGone(web.UID) {
		t.Error("IsGone wrong once the sources were read")
	}
}

// TestRunFeedsTheLoop: Run hands each input to its step — snapshots,
// runtime and probe events, finished terminations, the housekeeping tick —
// and returns when its context ends.
func TestRunFeedsTheLoop(t *testing.T) {
	h := newHarness(t)
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	snapshots := make(chan Snapshot)
	runtimeEvents := make(chan pleg.Event)
	probes := make(chan types.UID)
	terminated := make(chan types.UID)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.loop.Run(ctx, Inputs{Snapshots: snapshots, Runtime: runtimeEvents, Probes: probes, Terminated: terminated})
	}()
	// Unbuffered channels: each send returns once the loop took the
	// input, and the next send once it finished with it.
	snapshots <- Snapshot{Source: podspec.SourceFile, Pods: []*v1.Pod{pod}}
	runtimeEvents <- pleg.Event{PodUID: pod.UID}
	probes <- pod.UID
	if !h.clk.HasWaiters() { // made before the first input was taken
		t.Fatal("Run has no housekeeping ticker")
	}
	h.clk.Step(housekeepingPeriod)
	terminated <- "unknown"
	cancel()
	<-done
	want := []string{"update web", "update web", "update web"}
	if len(h.workers.calls) != len(want) {
		t.Fatalf("worker calls %v, want %v", h.workers.calls, want)
	}
	if len(h.prober.cleanups) != 1 {
		t.Fatalf("housekeeping ran %d times, want once for one tick", len(h.prober.cleanups))
	}
}
