package events

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

var testNames nameSeq

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// step is one event fed to the correlator, after advancing the clock.
type step struct {
	advance time.Duration
	object  string // pod name; default "web"
	typ     string // default Warning
	reason  string // default BackOff
	message string // default "back-off restarting"
	// expectations
	skip     bool
	count    int32
	combined bool
	sameAs   int // 1-based index of the step whose event name this one reuses; 0: a new name
}

// len is the cache's size, for tests.
func (c *lru[K, V]) len() int { return len(c.items) }

func testEvent(now time.Time, s step) *v1.Event {
	obj, typ, reason, msg := s.object, s.typ, s.reason, s.message
	if obj == "" {
		obj = "web"
	}
	if typ == "" {
		typ = v1.EventTypeWarning
	}
	if reason == "" {
		reason = "BackOff"
	}
	if msg == "" {
		msg = "back-off restarting"
	}
	ts := metav1.NewTime(now)
	return &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: eventName(obj, testNames.next(now.UnixNano())), Namespace: "default"},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: obj, UID: types.UID("uid-" + obj)},
		Source:         v1.EventSource{Component: Component, Host: "node1"},
		Type:           typ, Reason: reason, Message: msg,
		FirstTimestamp: ts, LastTimestamp: ts, Count: 1,
	}
}

func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestCorrelatorSequences(t *testing.T) {
	var similar []step
	for i := 0; i < 9; i++ {
		similar = append(similar, step{message: fmt.Sprintf("msg %d", i), count: 1})
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"identical events are counted onto the first", []step{
			{count: 1},
			{advance: time.Second, count: 2, sameAs: 1},
			{advance: time.Minute, count: 3, sameAs: 1},
		}},
		{"different objects are not merged", []step{
			{count: 1},
			{object: "db", count: 1},
			{count: 2, sameAs: 1},
		}},
		{"different reasons are not merged", []step{
			{count: 1},
			{reason: "Unhealthy", count: 1},
		}},
		{"ten similar messages within ten minutes combine", append(append([]step{}, similar...),
			step{advance: time.Minute, message: "msg 9", combined: true, count: 1},
			step{message: "msg 10", combined: true, count: 2, sameAs: 10},
			step{message: "msg 11", combined: true, count: 3, sameAs: 10},
			step{message: "msg 3", count: 2, sameAs: 4},
			step{message: "msg 10", combined: true, count: 4, sameAs: 10},
		)},
		{"a gap over ten minutes restarts the group", append(append([]step{}, similar...),
			step{advance: 10*time.Minute + time.Second, message: "msg 9", count: 1},
		)},
		{"a gap of exactly ten minutes keeps the group", append(append([]step{}, similar...),
			step{advance: 10 * time.Minute, message: "msg 9", combined: true, count: 1},
		)},
		{"spam filter: burst of 25, then one per five minutes", append(append([]step{{count: 1}},
			repeat(24, step{skip: false})...),
			step{skip: true},
			step{advance: 4 * time.Minute, skip: true},
			step{advance: time.Minute, count: 28, sameAs: 1},
			step{skip: true},
		)},
		{"as client-go, one bucket per object and type: a noisy reason starves the others of its type", append(append(repeat(25, step{reason: "BackOff"}), repeat(15, step{reason: "BackOff", skip: true})...),
			step{reason: "Failed", message: "Error: ErrImagePull", skip: true},
			step{reason: "Started", typ: v1.EventTypeNormal, message: "Started container app", count: 1},
			step{object: "db", count: 1},
		)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, CorrelatorConfig{}, tc.steps) })
	}
}

func TestCorrelatorPerReasonSpamKeyIsOptIn(t *testing.T) {
	runSteps(t, CorrelatorConfig{SpamKeyPerReason: true}, append(append(repeat(25, step{reason: "BackOff"}), repeat(15, step{reason: "BackOff", skip: true})...),
		step{reason: "Failed", message: "Error: ErrImagePull", count: 1},
		step{reason: "Started", typ: v1.EventTypeNormal, message: "Started container app", count: 1},
		step{reason: "Killing", typ: v1.EventTypeNormal, message: "Stopping container app", count: 1},
	))
}

// runSteps feeds steps to a new correlator with cfg and checks each
// outcome.
func runSteps(t *testing.T, cfg CorrelatorConfig, steps []step) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	c, err := NewCorrelator(cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(steps))
	for i, s := range steps {
		clk.Step(s.advance)
		in := testEvent(clk.Now(), s)
		res := c.Correlate(in)
		if res.Skip != s.skip {
			t.Fatalf("step %d: skip = %v, want %v", i+1, res.Skip, s.skip)
		}
		if res.Skip {
			continue
		}
		ev := res.Event
		names[i] = ev.Name
		if s.count != 0 && ev.Count != s.count {
			t.Errorf("step %d: count = %d, want %d", i+1, ev.Count, s.count)
		}
		if res.Update != (ev.Count > 1) {
			t.Errorf("step %d: update = %v with count %d", i+1, res.Update, ev.Count)
		}
		if got := strings.HasPrefix(ev.Message, CombinedPrefix); got != s.combined {
			t.Errorf("step %d: message %q, combined = %v, want %v", i+1, ev.Message, got, s.combined)
		}
		if !ev.LastTimestamp.Time.Equal(clk.Now()) {
			t.Errorf("step %d: lastTimestamp %v, want %v", i+1, ev.LastTimestamp, clk.Now())
		}
		if s.sameAs != 0 {
			if ev.Name != names[s.sameAs-1] {
				t.Errorf("step %d: name %q, want step %d's %q", i+1, ev.Name, s.sameAs, names[s.sameAs-1])
			}
		} else if s.count == 1 {
			for j := 0; j < i; j++ {
				if names[j] == ev.Name {
					t.Errorf("step %d: reuses step %d's name %q", i+1, j+1, ev.Name)
				}
			}
		}
	}
}

func TestCorrelatorDedupKeepsFirstTimestamp(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	c, _ := NewCorrelator(CorrelatorConfig{}, clk)
	first := c.Correlate(testEvent(clk.Now(), step{})).Event
	clk.Step(3 * time.Minute)
	second := c.Correlate(testEvent(clk.Now(), step{})).Event
	if !second.FirstTimestamp.Equal(&first.FirstTimestamp) || !second.LastTimestamp.Time.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("timestamps first=%v last=%v, want first=%v last=%v", second.FirstTimestamp, second.LastTimestamp, t0, t0.Add(3*time.Minute))
	}
}

func TestCorrelatorCachesAreBounded(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	c, _ := NewCorrelator(CorrelatorConfig{CacheSize: 16}, clk)
	for i := 0; i < 1000; i++ {
		c.Correlate(testEvent(clk.Now(), step{object: fmt.Sprintf("pod-%d", i), message: fmt.Sprintf("m%d", i)}))
	}
	if c.group.len() != 16 || c.dedup.len() != 16 {
		t.Fatalf("cache sizes group=%d dedup=%d, want 16 each", c.group.len(), c.dedup.len())
	}
	// The first object was evicted: its repeat starts a new count.
	if got := c.Correlate(testEvent(clk.Now(), step{object: "pod-0", message: "m0"})).Event.Count; got != 1 {
		t.Fatalf("evicted event count = %d, want 1", got)
	}
	// A recent one is still counted.
	if got := c.Correlate(testEvent(clk.Now(), step{object: "pod-999", message: "m999"})).Event.Count; got != 2 {
		t.Fatalf("recent event count = %d, want 2", got)
	}
}

func TestCorrelatorConfigValidation(t *testing.T) {
	if _, err := NewCorrelator(CorrelatorConfig{SpamBurst: -1}, clocktesting.NewFakeClock(t0)); err == nil || !strings.Contains(err.Error(), "SpamBurst") {
		t.Fatalf("err = %v, want one naming SpamBurst", err)
	}
}
