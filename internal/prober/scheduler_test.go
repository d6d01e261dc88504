package prober

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/container"
	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// scheduled counts the workers waiting in the heap.
func (s *scheduler) scheduled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.heap {
		if e.gen == e.w.gen && e.w.queued {
			n++
		}
	}
	return n
}

// gateExecer holds every exec until released and tracks how many run at
// once; it stands in for slow containers.
type gateExecer struct {
	release chan struct{}
	mu      sync.Mutex
	now     int
	max     int
	total   int
}

func (g *gateExecer) ExecSync(ctx context.Context, _ container.ID, _ []string, _ time.Duration) ([]byte, []byte, int32, error) {
	g.mu.Lock()
	g.now++
	g.total++
	if g.now > g.max {
		g.max = g.now
	}
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.now--
	g.mu.Unlock()
	return nil, nil, 0, nil
}

func (g *gateExecer) counts() (now, max, total int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now, g.max, g.total
}

func TestMaxInFlight(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	st := &fakeStatus{}
	g := &gateExecer{release: make(chan struct{})}
	m, err := NewManager(Config{Status: st, Execer: g, Clock: clk, Logger: testLogger(t), MaxInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); m.Stop() })
	clk.Step(time.Minute) // not a fresh agent: every probe is due at once
	for i := 0; i < 5; i++ {
		pod := newPod(fmt.Sprintf("uid-%d", i), v1.Container{Name: "app", LivenessProbe: execProbe()})
		st.set(pod.UID, running(clk.Now(), "app", fmt.Sprintf("test://cid-%d", i)))
		if err := m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
	}
	m.Start(ctx)
	waitFor(t, "two probes in flight", func() bool { n, _, _ := g.counts(); return n == 2 })
	close(g.release)
	waitFor(t, "all five probes", func() bool { _, _, total := g.counts(); return total == 5 })
	if _, max, _ := g.counts(); max > 2 {
		t.Fatalf("%d probes ran at once, want at most 2", max)
	}
}

func TestTriggerWhileRunningRunsAgain(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	st := &fakeStatus{}
	g := &gateExecer{release: make(chan struct{})}
	m, err := NewManager(Config{Status: st, Execer: g, Clock: clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); m.Stop() })
	clk.Step(time.Minute)
	pod := newPod("uid-1", v1.Container{Name: "app", ReadinessProbe: execProbe()})
	s := running(clk.Now(), "app", "test://cid-1")
	st.set(pod.UID, s)
	if err := m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	m.Start(ctx)
	waitFor(t, "the first probe", func() bool { n, _, _ := g.counts(); return n == 1 })
	// The status manager asks for readiness while the first probe runs.
	m.UpdatePodStatus(pod, &s)
	close(g.release)
	// The second run comes without the clock moving a whole period.
	waitFor(t, "the triggered probe", func() bool { _, _, total := g.counts(); return total == 2 })
}
