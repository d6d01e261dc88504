package backoff

import (
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

func TestDoublesCapsAndStartsOver(t *testing.T) {
	clk := testclock.NewFakeClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	b := New(clk, 10*time.Second, 300*time.Second)
	var delays []time.Duration
	for range 7 {
		finished := clk.Now()
		b.Next("k", finished)
		d, _, in := b.InBackoffSince("k", finished)
		if !in {
			t.Fatalf("not in back-off right after a failure")
		}
		delays = append(delays, d)
		clk.Step(d) // the container restarts once the delay is over...
		if _, _, in := b.InBackoffSince("k", finished); in {
			t.Fatalf("still in back-off after %v", d)
		}
	}
	want := []time.Duration{10, 20, 40, 80, 160, 300, 300}
	for i := range want {
		if delays[i] != want[i]*time.Second {
			t.Fatalf("delays = %v, want %v seconds", delays, want)
		}
	}
	// ...and after running fine for more than 10 minutes it starts over.
	clk.Step(11 * time.Minute)
	b.Next("k", clk.Now())
	if d, _, _ := b.InBackoffSince("k", clk.Now()); d != 10*time.Second {
		t.Fatalf("delay after a long run = %v, want 10s", d)
	}
}

func TestSinceUpdateResetAndGC(t *testing.T) {
	clk := testclock.NewFakeClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	b := New(clk, 10*time.Second, 300*time.Second)
	b.Next("img", clk.Now())
	clk.Step(4 * time.Second)
	if left, in := b.InBackoffSinceUpdate("img"); !in || left != 6*time.Second {
		t.Fatalf("InBackoffSinceUpdate = %v %v, want 6s left", left, in)
	}
	b.Reset("img")
	if _, in := b.InBackoffSinceUpdate("img"); in {
		t.Fatal("still in back-off after Reset")
	}
	b.Next("old", clk.Now())
	clk.Step(11 * time.Minute)
	b.GC()
	if len(b.entries) != 0 {
		t.Fatalf("GC kept %d expired entries", len(b.entries))
	}
}
