package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/errdefs"
)

// flakySink fails its first `failures` calls with err, then succeeds.
type flakySink struct {
	mu       sync.Mutex
	failures int
	err      error
	creates  int
	updates  int
	written  []*v1.Event
}

func (s *flakySink) call(ev *v1.Event, update bool) (*v1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if update {
		s.updates++
	} else {
		s.creates++
	}
	if s.failures > 0 {
		s.failures--
		return nil, fmt.Errorf("write %s: %w", ev.Name, s.err)
	}
	s.written = append(s.written, ev)
	return ev, nil
}

func (s *flakySink) Create(_ context.Context, ev *v1.Event) (*v1.Event, error) {
	return s.call(ev, false)
}
func (s *flakySink) Update(_ context.Context, ev *v1.Event) (*v1.Event, error) {
	return s.call(ev, true)
}

func (s *flakySink) attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates + s.updates
}

// stepUntil runs f in a goroutine and steps the fake clock by d whenever
// f is sleeping on it, until f returns (or 30 s pass).
func stepUntil(t *testing.T, clk *clocktesting.FakeClock, d time.Duration, f func() bool) bool {
	t.Helper()
	done := make(chan bool, 1)
	go func() { done <- f() }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case ok := <-done:
			return ok
		default:
		}
		if clk.HasWaiters() {
			clk.Step(d)
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	t.Fatal("write did not finish within 30s")
	return false
}

func newTestWriter(t *testing.T, next Sink) (*RetryWriter, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	w, err := NewRetryWriter(RetryConfig{}, next, clk, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w, clk
}

func TestRetryWriterRetries(t *testing.T) {
	unavailable := fmt.Errorf("connection refused: %w", errdefs.ErrUnavailable)
	tests := []struct {
		failures     int
		err          error
		wantWritten  bool
		wantAttempts int
		want         RetryStats
	}{
		{failures: 0, err: unavailable, wantWritten: true, wantAttempts: 1, want: RetryStats{Written: 1}},
		{failures: 3, err: unavailable, wantWritten: true, wantAttempts: 4, want: RetryStats{Written: 1}},
		{failures: 11, err: unavailable, wantWritten: true, wantAttempts: 12, want: RetryStats{Written: 1}},
		{failures: 12, err: unavailable, wantAttempts: 12, want: RetryStats{GivenUp: 1}},
		{failures: 50, err: errors.New("unclassified"), wantAttempts: 12, want: RetryStats{GivenUp: 1}},
		{failures: 5, err: errdefs.ErrInvalidArgument, wantAttempts: 1, want: RetryStats{Rejected: 1}},
		{failures: 5, err: errdefs.ErrAlreadyExists, wantAttempts: 1, want: RetryStats{Rejected: 1}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d failures of %v", tc.failures, tc.err), func(t *testing.T) {
			sink := &flakySink{failures: tc.failures, err: tc.err}
			w, clk := newTestWriter(t, sink)
			ev := testEvent(t0, step{})
			written := stepUntil(t, clk, 10*time.Second, func() bool { return w.write(context.Background(), ev, false) })
			if written != tc.wantWritten || sink.attempts() != tc.wantAttempts {
				t.Fatalf("written=%v after %d attempts, want %v after %d", written, sink.attempts(), tc.wantWritten, tc.wantAttempts)
			}
			if got := w.Stats(); got != tc.want {
				t.Fatalf("stats %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRetryWriterSleepsOnTheClock(t *testing.T) {
	sink := &flakySink{failures: 2, err: errdefs.ErrUnavailable}
	w, clk := newTestWriter(t, sink)
	w.rand = func() float64 { return 0.5 }
	done := make(chan bool, 1)
	go func() { done <- w.write(context.Background(), testEvent(t0, step{}), false) }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitFor("first sleep", clk.HasWaiters)
	clk.Step(4900 * time.Millisecond) // the first sleep is half the interval
	if n := sink.attempts(); n != 1 {
		t.Fatalf("%d attempts before the jittered first sleep ended", n)
	}
	clk.Step(100 * time.Millisecond)
	waitFor("second attempt", func() bool { return sink.attempts() == 2 && clk.HasWaiters() })
	clk.Step(9 * time.Second)
	if n := sink.attempts(); n != 2 {
		t.Fatalf("%d attempts before the full 10s interval", n)
	}
	clk.Step(time.Second)
	if ok := <-done; !ok || sink.attempts() != 3 {
		t.Fatalf("written=%v after %d attempts", ok, sink.attempts())
	}
}

func TestRetryWriterUpdateFallsBackToCreate(t *testing.T) {
	sink := &flakySink{failures: 1, err: errdefs.ErrNotFound}
	w, _ := newTestWriter(t, sink)
	if !w.write(context.Background(), testEvent(t0, step{}), true) {
		t.Fatal("not written")
	}
	if sink.updates != 1 || sink.creates != 1 {
		t.Fatalf("updates=%d creates=%d, want an update then a create", sink.updates, sink.creates)
	}
}

func TestRetryWriterAsyncAccounting(t *testing.T) {
	sink := &flakySink{}
	w, clk := newTestWriter(t, sink)
	w.Start(context.Background())
	for i := 0; i < 100; i++ {
		if _, err := w.Create(context.Background(), testEvent(clk.Now(), step{object: fmt.Sprintf("p%d", i)})); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Written != 100 || st.Queued != 100 {
		t.Fatalf("stats %+v, want 100 written", st)
	}
	if _, err := w.Create(context.Background(), testEvent(clk.Now(), step{})); err != nil || w.Stats().Dropped != 1 {
		t.Fatalf("after shutdown: err=%v stats %+v, want the event dropped and counted", err, w.Stats())
	}
}

func TestRetryWriterShutdownDeadlineAbandons(t *testing.T) {
	sink := &flakySink{failures: 1 << 30, err: errdefs.ErrUnavailable} // the API server is down
	w, clk := newTestWriter(t, sink)
	w.Start(context.Background())
	for i := 0; i < 5; i++ {
		_, _ = w.Create(context.Background(), testEvent(clk.Now(), step{object: fmt.Sprintf("p%d", i)}))
	}
	deadline := time.Now().Add(30 * time.Second)
	for !clk.HasWaiters() && time.Now().Before(deadline) { // the first event is sleeping between tries
		time.Sleep(100 * time.Microsecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	st := w.Stats()
	if st.Queued != 5 || st.Abandoned != 5 || st.Queued != st.Written+st.GivenUp+st.Rejected+st.Abandoned {
		t.Fatalf("stats %+v, want all 5 abandoned and accounted", st)
	}
}
