package nodeshutdown

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/testutil"
)

// fakeLogind stands in for systemd-logind, which this machine does not run
// (no systemd as PID 1); the node-container test bed runs the real one.
type fakeLogind struct {
	mu        sync.Mutex
	delayMax  time.Duration
	raisedTo  time.Duration
	held      int // locks taken and not released
	announced chan bool
}

func (f *fakeLogind) InhibitDelayMax() (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delayMax, nil
}

func (f *fakeLogind) RaiseInhibitDelayMax(d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.raisedTo, f.delayMax = d, d
	return nil
}

func (f *fakeLogind) Inhibit() (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held++
	var once sync.Once
	return func() { once.Do(func() { f.mu.Lock(); f.held--; f.mu.Unlock() }) }, nil
}

func (f *fakeLogind) PrepareForShutdown(context.Context) (<-chan bool, error) {
	return f.announced, nil
}

func (f *fakeLogind) locks() int { f.mu.Lock(); defer f.mu.Unlock(); return f.held }

// fakePods is the agent's pods: a kill records the order, grace and status
// and ends the pod at once unless it is stubborn.
type fakePods struct {
	mu       sync.Mutex
	active   []*v1.Pod
	stubborn map[string]bool
	killed   []string
	grace    map[string]int64
	status   map[string]v1.PodStatus
}

func (p *fakePods) Active() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*v1.Pod{}, p.active...)
}

func (p *fakePods) Kill(pod *v1.Pod, st v1.PodStatus, grace int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killed = append(p.killed, pod.Name)
	p.grace[pod.Name], p.status[pod.Name] = grace, st
	if p.stubborn[pod.Name] {
		return nil
	}
	for i, a := range p.active {
		if a.UID == pod.UID {
			p.active = append(p.active[:i], p.active[i+1:]...)
			break
		}
	}
	return nil
}

func withUID(p *v1.Pod) *v1.Pod { p.UID = types.UID("uid-" + p.Name); return p }

func TestShutdownStopsPodsByPriorityThenReleasesTheLock(t *testing.T) {
	lg := &fakeLogind{delayMax: 5 * time.Second, announced: make(chan bool)}
	pods := &fakePods{
		active:   []*v1.Pod{withUID(pod("dns", systemCriticalPriority, 30)), withUID(pod("web", 0, 3)), withUID(pod("batch", 0, 60))},
		stubborn: map[string]bool{"batch": true},
		grace:    map[string]int64{}, status: map[string]v1.PodStatus{},
	}
	clk := clocktesting.NewFakeClock(time.Now())
	m, err := New(Config{Period: 30 * time.Second, CriticalPeriod: 10 * time.Second, Logind: lg,
		KillPod: pods.Kill, ActivePods: pods.Active, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if lg.raisedTo != 30*time.Second || lg.locks() != 1 {
		t.Fatalf("after start: InhibitDelayMax raised to %s, %d locks; want 30s and 1", lg.raisedTo, lg.locks())
	}
	if ok, _, _ := m.Admit(pods.active[0]); !ok {
		t.Fatal("a pod is rejected before any shutdown")
	}

	stepped := make(chan struct{})
	go func() { m.Step(ctx, true); close(stepped) }()
	// "batch" does not stop: the regular group waits out its 20 s.
	testutil.WaitFor(t, "the regular group stopping, batch still running", func() bool { return m.ShuttingDown() && len(pods.Active()) == 2 && clk.HasWaiters() })
	if ok, reason, msg := m.Admit(withUID(pod("new", 0, 1))); ok || reason != RejectReason || msg != RejectMessage {
		t.Errorf("admission while shutting down: %v %q %q", ok, reason, msg)
	}
	clk.Step(20 * time.Second)
	<-stepped

	if want := []string{"web", "batch", "dns"}; len(pods.killed) != 3 || pods.killed[0] != want[0] || pods.killed[1] != want[1] || pods.killed[2] != want[2] {
		t.Errorf("kill order %v, want %v (regular pods first, critical last)", pods.killed, want)
	}
	if pods.grace["web"] != 3 || pods.grace["batch"] != 20 || pods.grace["dns"] != 10 {
		t.Errorf("grace periods %v, want web 3 (its own), batch 20 (the group's), dns 10", pods.grace)
	}
	st := pods.status["web"]
	if st.Phase != v1.PodFailed || st.Reason != Reason || st.Message != Message ||
		len(st.Conditions) != 1 || st.Conditions[0].Type != v1.DisruptionTarget || st.Conditions[0].Reason != "TerminationByKubelet" {
		t.Errorf("final status %+v", st)
	}
	if lg.locks() != 0 {
		t.Errorf("the inhibitor lock is still held after the pods stopped")
	}

	m.Step(ctx, false) // shutdown cancelled
	if m.ShuttingDown() || lg.locks() != 1 {
		t.Errorf("after a cancelled shutdown: shutting down %v, %d locks; want false and 1", m.ShuttingDown(), lg.locks())
	}
}

func TestDisabledAndInvalid(t *testing.T) {
	m, err := New(Config{})
	if err != nil || m.Enabled() {
		t.Fatalf("no grace period: %v, enabled %v", err, m.Enabled())
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.Stop()
	if _, err := New(Config{Period: 10 * time.Second, CriticalPeriod: 20 * time.Second}); err == nil {
		t.Error("a critical period longer than the whole is accepted")
	}
}
