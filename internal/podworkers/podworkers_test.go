package podworkers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// recorder is a Syncer that records the calls it gets and answers from
// per-pod scripts.
type recorder struct {
	mu       sync.Mutex
	calls    []string
	terminal map[types.UID]bool
	requeue  time.Duration
	failSync int
	block    map[types.UID]chan struct{} // SyncTerminatingPod waits on it
	changed  chan struct{}
	// blockSync makes SyncPod of a pod wait until its ctx ends (a slow
	// image pull); blockTerm does the same for SyncTerminatingPod.
	blockSync map[types.UID]bool
	blockTerm map[types.UID]bool
	// failCleanup makes that many SyncTerminatedPod calls fail.
	failCleanup int
	// failRequeue is the requeue a failing SyncPod asks for.
	failRequeue time.Duration
}

func newRecorder() *recorder {
	return &recorder{terminal: map[types.UID]bool{}, block: map[types.UID]chan struct{}{}, changed: make(chan struct{}, 100),
		blockSync: map[types.UID]bool{}, blockTerm: map[types.UID]bool{}}
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
	r.changed <- struct{}{}
}

func (r *recorder) SyncPod(ctx context.Context, pod *v1.Pod) (bool, time.Duration, error) {
	r.mu.Lock()
	fail := r.failSync > 0
	if fail {
		r.failSync--
	}
	terminal, requeue, block, failRequeue := r.terminal[pod.UID], r.requeue, r.blockSync[pod.UID], r.failRequeue
	r.mu.Unlock()
	r.note("sync " + string(pod.UID))
	if block {
		<-ctx.Done()
		return false, 0, ctx.Err()
	}
	if fail {
		return false, failRequeue, errors.New("boom")
	}
	return terminal, requeue, nil
}

func (r *recorder) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, grace *int64) error {
	r.mu.Lock()
	ch, block := r.block[pod.UID], r.blockTerm[pod.UID]
	r.blockTerm[pod.UID] = false // only the first attempt hangs
	r.mu.Unlock()
	if ch != nil {
		<-ch
	}
	g := "nil"
	if grace != nil {
		g = time.Duration(*grace * int64(time.Second)).String()
	}
	r.note("terminating " + string(pod.UID) + " " + g)
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (r *recorder) SyncTerminatedPod(_ context.Context, pod *v1.Pod) error {
	r.mu.Lock()
	fail := r.failCleanup > 0
	if fail {
		r.failCleanup--
	}
	r.mu.Unlock()
	r.note("terminated " + string(pod.UID))
	if fail {
		return errors.New("cgroup busy")
	}
	return nil
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// waitCalls waits (generously) until the recorder has seen n calls.
func (r *recorder) waitCalls(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if got := r.snapshot(); len(got) >= n {
			return got
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("wanted %d calls, got %v", n, r.snapshot())
		}
	}
}

func pod(uid, name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "default"}}
}

func newWorkers(t *testing.T, r *recorder) (*Workers, *clocktesting.FakeClock) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	w := New(ctx, Config{Syncer: r, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ResyncInterval: time.Minute, RetryInterval: time.Second})
	t.Cleanup(func() { cancel(); w.Wait() })
	return w, clk
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTerminalPodIsTerminatedOnceAndNeverSyncedAgain(t *testing.T) {
	r := newRecorder()
	r.terminal["a"] = true
	w, _ := newWorkers(t, r)
	w.UpdatePod(pod("a", "job"))
	got := r.waitCalls(t, 3)
	want := []string{"sync a", "terminating a nil", "terminated a"}
	if !equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	w.UpdatePod(pod("a", "job"))
	w.Resync("a")
	if p, _ := w.Phase("a"); p != Terminated {
		t.Fatalf("phase = %v, want terminated", p)
	}
	// The cleanup call is recorded just before the worker marks it done.
	deadline := time.Now().Add(20 * time.Second)
	for !w.Forget("a") {
		if time.Now().After(deadline) {
			t.Fatal("Forget refused a terminated pod")
		}
		time.Sleep(time.Millisecond)
	}
	if got := r.snapshot(); !equal(got, want) {
		t.Fatalf("a terminated pod was acted on again: %v", got)
	}
}

func TestKillUsesGracePeriodAndForgetWaitsForTermination(t *testing.T) {
	r := newRecorder()
	release := make(chan struct{})
	r.block["a"] = release
	w, _ := newWorkers(t, r)
	w.UpdatePod(pod("a", "web"))
	r.waitCalls(t, 1)
	grace := int64(5)
	w.KillPod(pod("a", "web"), &grace)
	// Termination is blocked: the worker must refuse to be forgotten.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p, _ := w.Phase("a"); p == Terminating {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("worker never started terminating")
		}
		time.Sleep(time.Millisecond)
	}
	if w.Forget("a") {
		t.Fatal("Forget dropped a pod that is still terminating")
	}
	close(release)
	got := r.waitCalls(t, 3)
	want := []string{"sync a", "terminating a 5s", "terminated a"}
	if !equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
}

func TestNamesakeWaitsForOldPodToTerminate(t *testing.T) {
	r := newRecorder()
	release := make(chan struct{})
	r.block["old"] = release
	w, _ := newWorkers(t, r)
	w.UpdatePod(pod("old", "web"))
	r.waitCalls(t, 1)
	w.KillPod(pod("old", "web"), nil)
	w.UpdatePod(pod("new", "web")) // the manifest changed: same name, new UID
	close(release)
	got := r.waitCalls(t, 4)
	want := []string{"sync old", "terminating old nil", "terminated old", "sync new"}
	if !equal(got, want) {
		t.Fatalf("calls = %v, want %v (the new pod must start after the old one is gone)", got, want)
	}
}

func TestRequeueAndRetryFollowTheClock(t *testing.T) {
	r := newRecorder()
	r.requeue = 10 * time.Second
	r.failSync = 1
	w, clk := newWorkers(t, r)
	w.UpdatePod(pod("a", "web"))
	r.waitCalls(t, 1) // fails
	waitForTimer(t, clk)
	clk.Step(time.Second) // RetryInterval
	r.waitCalls(t, 2)     // succeeds, asks for 10s
	waitForTimer(t, clk)
	clk.Step(9 * time.Second)
	if got := r.snapshot(); len(got) != 2 {
		t.Fatalf("synced before the requeue delay: %v", got)
	}
	clk.Step(time.Second)
	r.waitCalls(t, 3)
}

func waitForTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("worker never armed its timer")
		}
		time.Sleep(time.Millisecond)
	}
}

// A namesake waits for the old pod's cleanup; if the agent could forget the
// old worker while its cleanup was failing, the retries stopped and the new
// pod never started.
func TestForgetWaitsForCleanupSoNamesakeStillStarts(t *testing.T) {
	r := newRecorder()
	r.failCleanup = 1
	release := make(chan struct{})
	r.block["old"] = release
	w, clk := newWorkers(t, r)
	w.UpdatePod(pod("old", "web"))
	r.waitCalls(t, 1)
	w.KillPod(pod("old", "web"), nil)
	w.UpdatePod(pod("new", "web"))
	close(release)
	r.waitCalls(t, 3) // sync, terminating, failed cleanup
	if p, _ := w.Phase("old"); p != Terminated {
		t.Fatalf("phase = %v, want terminated", p)
	}
	if w.Forget("old") {
		t.Fatal("Forget dropped a pod whose cleanup has not succeeded")
	}
	waitForTimer(t, clk)
	clk.Step(time.Second) // RetryInterval: the cleanup runs again
	got := r.waitCalls(t, 5)
	want := []string{"sync old", "terminating old nil", "terminated old", "terminated old", "sync new"}
	if !equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if !w.Forget("old") {
		t.Fatal("Forget refused a pod that terminated and was cleaned up")
	}
}

// The kubelet cancels a sync in progress when the pod is killed: a pod
// deleted during a long image pull must not wait for the pull to end.
func TestKillCancelsSyncInProgress(t *testing.T) {
	r := newRecorder()
	r.blockSync["a"] = true
	w, _ := newWorkers(t, r)
	w.UpdatePod(pod("a", "web"))
	r.waitCalls(t, 1) // the sync now hangs until cancelled
	grace := int64(5)
	w.KillPod(pod("a", "web"), &grace)
	got := r.waitCalls(t, 3)
	want := []string{"sync a", "terminating a 5s", "terminated a"}
	if !equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
}

// A shorter grace period (a forced deletion) restarts a termination in
// progress with it, without waiting for the longer one to run out.
func TestShorterGracePeriodRestartsTermination(t *testing.T) {
	r := newRecorder()
	r.blockTerm["a"] = true
	w, _ := newWorkers(t, r)
	w.UpdatePod(pod("a", "web"))
	r.waitCalls(t, 1)
	long, short := int64(30), int64(1)
	w.KillPod(pod("a", "web"), &long)
	r.waitCalls(t, 2) // terminating with 30s, hanging
	w.KillPod(pod("a", "web"), &short)
	got := r.waitCalls(t, 4)
	want := []string{"sync a", "terminating a 30s", "terminating a 1s", "terminated a"}
	if !equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
}

// A failed sync that asks for a later sync (a back-off) is not retried
// every RetryInterval; one that asks for nothing is.
func TestFailedSyncHonoursRequeue(t *testing.T) {
	r := newRecorder()
	w, _ := newWorkers(t, r)
	for _, tc := range []struct {
		requeue, want time.Duration
	}{{10 * time.Second, 10 * time.Second}, {0, time.Second}, {time.Millisecond, time.Second}} {
		r.mu.Lock()
		r.failSync, r.failRequeue = 1, tc.requeue
		r.mu.Unlock()
		next, retry := w.runPhase(context.Background(), pod("a", "web"), Syncing, nil)
		if next != Syncing || retry != tc.want {
			t.Errorf("requeue %v: got %v after %v, want syncing after %v", tc.requeue, next, retry, tc.want)
		}
	}
}

// A requeue later than the resync interval (an active deadline an hour
// away) does not hold the periodic resync back; a sooner one is kept.
func TestRequeueNeverDelaysTheResync(t *testing.T) {
	r := newRecorder()
	w, _ := newWorkers(t, r)
	for _, tc := range []struct {
		requeue, want time.Duration
	}{{time.Hour, time.Minute}, {3 * time.Second, 3 * time.Second}} {
		r.mu.Lock()
		r.requeue = tc.requeue
		r.mu.Unlock()
		next, retry := w.runPhase(context.Background(), pod("a", "web"), Syncing, nil)
		if next != Syncing || retry != tc.want {
			t.Errorf("requeue %v: got %v after %v, want syncing after %v", tc.requeue, next, retry, tc.want)
		}
	}
}

func TestOnTerminatedIsCalledOnceWorkerCanBeForgotten(t *testing.T) {
	r := newRecorder()
	r.terminal["a"] = true
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan bool, 1)
	var w *Workers
	w = New(ctx, Config{Syncer: r, Clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnTerminated: func(uid types.UID) { got <- w.Forget(uid) }})
	t.Cleanup(func() { cancel(); w.Wait() })
	w.UpdatePod(pod("a", "job"))
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("Forget refused a pod reported as terminated")
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("OnTerminated never called; calls %v", r.snapshot())
	}
}
