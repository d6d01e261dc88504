package events

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/store"
)

// The agent's wiring: recorder -> broadcaster -> log and store sinks; the
// events are still there after the agent restarts.
func TestPipelineToStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(t0)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	st, err := store.OpenEvents(store.EventsConfig{Dir: dir}, clk, log)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBroadcaster(Config{}, clk, log)
	if err != nil {
		t.Fatal(err)
	}
	b.AddSink(NewLogSink(log))
	b.AddSink(NewStoreSink(st))
	b.Start(context.Background())
	rec := b.NewRecorder(v1.EventSource{Component: Component, Host: "node1"})

	web, db := testPod("web"), testPod("db")
	rec.Event(ContainerRef(web, "app"), v1.EventTypeNormal, "Pulled", "Container image \"host\" already present on machine")
	rec.Event(ContainerRef(web, "app"), v1.EventTypeNormal, "Created", "Created container app")
	rec.Event(ContainerRef(web, "app"), v1.EventTypeNormal, "Started", "Started container app")
	for i := 0; i < 5; i++ {
		clk.Step(10 * time.Second)
		rec.Event(ContainerRef(web, "app"), v1.EventTypeWarning, "BackOff", "Back-off restarting failed container app")
	}
	for i := 0; i < 300; i++ { // more than the store sink's batch
		rec.Eventf(db, v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: attempt %d", i%12)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2, err := store.OpenEvents(store.EventsConfig{Dir: dir}, clk, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	evs, err := st2.List("ns1", "web")
	if err != nil {
		t.Fatal(err)
	}
	// Order by last seen, as the CLI shows them.
	slices.SortStableFunc(evs, func(a, b v1.Event) int {
		return cmp.Or(a.LastTimestamp.Compare(b.LastTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s/%d", e.Reason, e.Count))
	}
	if strings.Join(got, " ") != "Pulled/1 Created/1 Started/1 BackOff/5" {
		t.Fatalf("web's events after restart: %v", got)
	}
	if last := evs[3]; !last.LastTimestamp.Time.Equal(t0.Add(50*time.Second)) || !last.FirstTimestamp.Time.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("BackOff first %v last %v", last.FirstTimestamp, last.LastTimestamp)
	}
	dbEvents, _ := st2.List("ns1", "db")
	combined := 0
	for _, e := range dbEvents {
		if strings.HasPrefix(e.Message, CombinedPrefix) {
			combined++
		}
	}
	// 9 distinct messages pass, then everything folds into one combined
	// event, until the spam filter's burst of 25 is spent.
	if len(dbEvents) != 10 || combined != 1 {
		t.Fatalf("db has %d events (%d combined), want 9 plain and 1 combined", len(dbEvents), combined)
	}
	if s := b.Stats(); s.Recorded != 308 || s.Filtered == 0 || s.Recorded != s.Dropped+s.Filtered+s.Delivered {
		t.Fatalf("stats %+v", s)
	}
	if out := logs.String(); !strings.Contains(out, "reason=BackOff") || !strings.Contains(out, "level=WARN") {
		t.Fatalf("log sink wrote nothing useful:\n%s", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
