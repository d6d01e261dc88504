package events_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/events"
)

// traceStep is one event of the reference trace, recorded after the clock
// advanced by advance.
type traceStep struct {
	advance                    time.Duration
	object, fieldPath          string
	eventType, reason, message string
}

// referenceTrace is a deterministic 5,000-event workload shaped like a
// node's: a few pods, each with Normal lifecycle events and noisy Warnings
// (back-off, probe failures with changing messages), mostly close together
// with occasional pauses of minutes, long enough to refill spam buckets and
// to close aggregation windows.
func referenceTrace() []traceStep {
	r := rand.New(rand.NewPCG(19, 2026))
	pods := []string{"web-node1", "db-node1", "cache-node1", "batch-node1", "api-node1", "log-node1"}
	out := make([]traceStep, 5000)
	storm := false
	for i := range out {
		if i%250 == 0 { // a new phase: a storm about two pods, or a calm spell
			storm = r.IntN(2) == 0
		}
		s := traceStep{object: pods[r.IntN(len(pods))], fieldPath: "spec.containers{app}"}
		switch p := r.IntN(100); {
		case i%250 == 0 && r.IntN(2) == 0:
			s.advance = time.Duration(5+r.IntN(8)) * time.Minute
		case storm:
			s.object = pods[r.IntN(2)]
			s.advance = time.Duration(1+r.IntN(500)) * time.Millisecond
		case p < 5:
			s.advance = time.Duration(1+r.IntN(6)) * time.Minute
		default:
			s.advance = time.Duration(1+r.IntN(60)) * time.Second
		}
		// Only web's probe messages and image tags vary enough to overflow
		// an aggregation group; the others' groups stay settled.
		variety := 6
		if s.object == pods[0] {
			variety = 24
		}
		k := r.IntN(10)
		if storm && r.IntN(5) < 4 {
			k = 3 // storms are mostly failing probes
		} else if !storm && r.IntN(5) < 4 {
			k = 6 + r.IntN(4) // calm spells mostly Normal
		}
		switch k {
		case 0, 1, 2:
			s.eventType, s.reason, s.message = v1.EventTypeWarning, "BackOff", "Back-off restarting failed container app in pod "+s.object
		case 3, 4:
			s.eventType, s.reason = v1.EventTypeWarning, "Unhealthy"
			s.message = "Readiness probe failed: HTTP probe failed with statuscode: " + strconv.Itoa(500+r.IntN(variety))
		case 5:
			s.eventType, s.reason = v1.EventTypeWarning, "Failed"
			s.message = "Error: container exited with code " + strconv.Itoa(r.IntN(6))
		case 6:
			s.eventType, s.reason = v1.EventTypeNormal, "Pulled"
			s.message = `Successfully pulled image "busybox:1.` + strconv.Itoa(30+r.IntN(variety)) + `" in 1.2s`
		case 7:
			s.eventType, s.reason, s.message = v1.EventTypeNormal, "Created", "Created container: app"
		case 8:
			s.eventType, s.reason, s.message = v1.EventTypeNormal, "Started", "Started container app"
		default:
			s.eventType, s.reason, s.message = v1.EventTypeNormal, "Killing", "Stopping container app"
			s.fieldPath = "spec.containers{sidecar}"
		}
		out[i] = s
	}
	return out
}

// outcome is what a correlator decided about one event of the trace, in
// terms both correlators share: names are replaced by the index of the
// first event that was written under that name.
type outcome struct {
	skip     bool
	combined bool
	count    int32
	nameOf   int
}

func (o outcome) String() string {
	if o.skip {
		return "skip"
	}
	return fmt.Sprintf("count=%d combined=%v name-of=%d", o.count, o.combined, o.nameOf)
}

// runTrace feeds the trace to correlate (one fresh event per step) with
// a fake clock, and returns the outcomes.
func runTrace(trace []traceStep, newCorrelate func(*clocktesting.FakeClock) func(*v1.Event) (*v1.Event, bool)) []outcome {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	correlate := newCorrelate(clk)
	src := v1.EventSource{Component: events.Component, Host: "node1"}
	firstWith := map[string]int{}
	out := make([]outcome, len(trace))
	for i, s := range trace {
		clk.Step(s.advance)
		now := metav1.NewTime(clk.Now())
		ev := &v1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: s.object + "." + strconv.Itoa(i), Namespace: "default"},
			InvolvedObject: v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: s.object,
				UID: types.UID("uid-" + s.object), FieldPath: s.fieldPath},
			Source: src, Type: s.eventType, Reason: s.reason, Message: s.message,
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
			ReportingController: src.Component, ReportingInstance: src.Host,
		}
		got, skip := correlate(ev)
		if skip {
			out[i] = outcome{skip: true}
			continue
		}
		if _, ok := firstWith[got.Name]; !ok {
			firstWith[got.Name] = i
		}
		out[i] = outcome{combined: strings.HasPrefix(got.Message, events.CombinedPrefix), count: got.Count, nameOf: firstWith[got.Name]}
	}
	return out
}

func clientGoCorrelate(clk *clocktesting.FakeClock) func(*v1.Event) (*v1.Event, bool) {
	c := record.NewEventCorrelator(clk)
	return func(ev *v1.Event) (*v1.Event, bool) {
		res, err := c.EventCorrelate(ev)
		if err != nil {
			panic(err)
		}
		return res.Event, res.Skip
	}
}

func miniletCorrelate(cfg events.CorrelatorConfig) func(*clocktesting.FakeClock) func(*v1.Event) (*v1.Event, bool) {
	return func(clk *clocktesting.FakeClock) func(*v1.Event) (*v1.Event, bool) {
		c, err := events.NewCorrelator(cfg, clk)
		if err != nil {
			panic(err)
		}
		return func(ev *v1.Event) (*v1.Event, bool) {
			res := c.Correlate(ev)
			return res.Event, res.Skip
		}
	}
}

// settled reports, for each event of the trace, whether client-go's full
// outcome for it is certain. Spam decisions always are (every event takes
// a token, whatever aggregation made of it). Aggregation is not: once a
// group (source, object, type, reason) has seen AggregateMaxEvents
// distinct messages within the interval, client-go forgets an arbitrary
// one (map order), so whether a later message of that group is combined,
// and every count depending on it, varies from run to run. Events of a
// group that has overflowed before are therefore compared on skip only;
// the overflowing event itself (always combined, count 1) is settled.
func settled(trace []traceStep) []bool {
	type group struct {
		messages   map[string]bool
		last       time.Duration
		overflowed bool
	}
	groups := map[string]*group{}
	out := make([]bool, len(trace))
	var now time.Duration
	for i, s := range trace {
		now += s.advance
		k := s.object + "/" + s.eventType + "/" + s.reason
		g := groups[k]
		if g == nil {
			g = &group{}
			groups[k] = g
		}
		if g.messages == nil || now-g.last > 10*time.Minute {
			g.messages = map[string]bool{}
		}
		g.last = now
		g.messages[s.message] = true
		out[i] = !g.overflowed
		if len(g.messages) >= 10 {
			g.overflowed = true
		}
	}
	return out
}

// TestCorrelatorMatchesClientGo runs the reference trace through
// client-go's EventCorrelator and minilet's default correlator and wants
// the same decision for every event: skipped or not and, where client-go's
// outcome is settled (see settled), combined or not, the count, and which
// earlier event's name it is written under.
func TestCorrelatorMatchesClientGo(t *testing.T) {
	trace := referenceTrace()
	ref := runTrace(trace, clientGoCorrelate)
	full := settled(trace)
	// Check the analysis: client-go agrees with itself on settled events.
	for r := 0; r < 3; r++ {
		for i, o := range runTrace(trace, clientGoCorrelate) {
			if o.skip != ref[i].skip || (full[i] && o != ref[i]) {
				t.Fatalf("event %d: client-go decided %v, then %v: it is not settled", i, ref[i], o)
			}
		}
	}
	nFull, skipped, combined := 0, 0, 0
	for i, o := range ref {
		if full[i] {
			nFull++
		}
		if o.skip {
			skipped++
		}
		if o.combined {
			combined++
		}
	}
	// The trace must exercise what is compared: spam drops, aggregation,
	// and mostly settled outcomes.
	if nFull < len(trace)*6/10 || skipped < 100 || combined < 20 {
		t.Fatalf("trace too weak: %d of %d settled, %d skipped, %d combined", nFull, len(trace), skipped, combined)
	}

	diffs := func(got []outcome) (n int, first []string) {
		for i := range got {
			if got[i].skip != ref[i].skip || (full[i] && got[i] != ref[i]) {
				n++
				if len(first) < 10 {
					first = append(first, fmt.Sprintf("event %d (%s %s %s): minilet %v, client-go %v", i, trace[i].object, trace[i].reason, trace[i].message, got[i], ref[i]))
				}
			}
		}
		return n, first
	}
	n, first := diffs(runTrace(trace, miniletCorrelate(events.CorrelatorConfig{})))
	t.Logf("%d events, %d skipped and %d combined by client-go; full outcome compared on %d, skip on all; %d differ", len(trace), skipped, combined, nFull, n)
	if n != 0 {
		t.Fatalf("%d of %d decisions differ from client-go's; first:\n%s", n, len(trace), strings.Join(first, "\n"))
	}

	// The opt-in per-reason key is a real departure, and this trace sees it.
	if n, _ := diffs(runTrace(trace, miniletCorrelate(events.CorrelatorConfig{SpamKeyPerReason: true}))); n == 0 {
		t.Fatalf("per-reason spam key made no difference on the trace: the comparison cannot tell the keys apart")
	} else {
		t.Logf("with SpamKeyPerReason: %d differences", n)
	}
}
