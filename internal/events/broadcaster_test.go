package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// memSink remembers what it was given. If gate is set, each call first
// signals entered and then waits for gate to close or ctx to end.
type memSink struct {
	mu      sync.Mutex
	created []*v1.Event
	updated []*v1.Event
	gate    chan struct{}
	entered chan struct{}
}

func (s *memSink) wait(ctx context.Context) error {
	if s.gate == nil {
		return nil
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *memSink) Create(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created = append(s.created, ev)
	return ev, nil
}

func (s *memSink) Update(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updated = append(s.updated, ev)
	return ev, nil
}

func (s *memSink) counts() (created, updated int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.created), len(s.updated)
}

func newTestBroadcaster(t *testing.T, cfg Config) (*Broadcaster, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	b, err := NewBroadcaster(cfg, clk, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b, clk
}

func testPod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{"app": name}}}
}

func counterValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

var _ *dto.Metric // the gathered families are client_model types

func checkAccounting(t *testing.T, st Stats) {
	t.Helper()
	if st.Recorded != st.Dropped+st.Filtered+st.Delivered {
		t.Fatalf("unaccounted events: %+v", st)
	}
}

func TestRecorderBuildsEvents(t *testing.T) {
	b, clk := newTestBroadcaster(t, Config{})
	sink := &memSink{}
	b.AddSink(sink)
	b.Start(context.Background())
	rec := b.NewRecorder(v1.EventSource{Component: Component, Host: "node1"})

	pod := testPod("web")
	pod.Spec.InitContainers = []v1.Container{{Name: "init"}}
	rec.Event(pod, v1.EventTypeNormal, "Scheduled", "picked up")
	rec.Eventf(ContainerRef(pod, "app"), v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s", "app")
	rec.Event(ContainerRef(pod, "init"), v1.EventTypeNormal, "Started", "Started container init")
	rec.Event(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "node1"}}, v1.EventTypeNormal, "Starting", "Starting minilet.")
	rec.AnnotatedEventf(pod, map[string]string{"k": "v"}, v1.EventTypeNormal, "Pulled", "image %q present", "host")
	rec.Event(pod, "Bogus", "Nope", "dropped: type is neither Normal nor Warning")
	rec.Event(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, v1.EventTypeNormal, "X", "dropped: no kind")
	rec.Event(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "Upper_Case"}}, v1.EventTypeNormal, "Y", "name falls back")
	pod.Labels["app"] = "changed after recording"
	b.Stop()

	created, _ := sink.counts()
	if created != 6 {
		t.Fatalf("sink got %d events, want 6", created)
	}
	st := b.Stats()
	if st.Recorded != 6 || st.Delivered != 6 {
		t.Fatalf("stats %+v, want 6 recorded and delivered (invalid ones never recorded)", st)
	}
	evs := sink.created
	e := evs[0]
	wantRef := v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns1", Name: "web", UID: "uid-web"}
	if e.InvolvedObject != wantRef {
		t.Errorf("involvedObject = %+v, want %+v", e.InvolvedObject, wantRef)
	}
	if !strings.HasPrefix(e.Name, "web.") || e.Namespace != "ns1" {
		t.Errorf("name %s/%s, want ns1/web.<hex>", e.Namespace, e.Name)
	}
	if e.Source != (v1.EventSource{Component: "kubelet", Host: "node1"}) || e.ReportingController != "kubelet" || e.ReportingInstance != "node1" {
		t.Errorf("source %+v reporting %s/%s", e.Source, e.ReportingController, e.ReportingInstance)
	}
	if !e.FirstTimestamp.Time.Equal(clk.Now()) || !e.LastTimestamp.Time.Equal(clk.Now()) || e.Count != 1 {
		t.Errorf("first %v last %v count %d, want the clock's time and 1", e.FirstTimestamp, e.LastTimestamp, e.Count)
	}
	if e.Labels["app"] != "web" {
		t.Errorf("labels %v, want a copy of the pod's", e.Labels)
	}
	if got := evs[1].InvolvedObject.FieldPath; got != "spec.containers{app}" {
		t.Errorf("fieldPath %q", got)
	}
	if evs[1].Message != "Back-off restarting failed container app" || evs[1].Type != v1.EventTypeWarning {
		t.Errorf("message %q type %q", evs[1].Message, evs[1].Type)
	}
	if got := evs[2].InvolvedObject.FieldPath; got != "spec.initContainers{init}" {
		t.Errorf("init fieldPath %q", got)
	}
	if n := evs[3]; n.Namespace != "default" || n.InvolvedObject.Kind != "Node" || n.InvolvedObject.UID != "node1" {
		t.Errorf("node event %s/%s ref %+v", n.Namespace, n.Name, n.InvolvedObject)
	}
	if evs[4].Annotations["k"] != "v" || evs[4].Message != `image "host" present` {
		t.Errorf("annotated event %v %q", evs[4].Annotations, evs[4].Message)
	}
	if n := evs[5].Name; strings.HasPrefix(n, "Upper_Case") || !isDNSSubdomain([]byte(n)) {
		t.Errorf("fallback name %q is not a valid generated name", n)
	}
	if evs[0].Name == evs[4].Name {
		t.Errorf("two events share the name %q", evs[0].Name)
	}
}

func TestBroadcasterDropsWhenFullAndCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, _ := newTestBroadcaster(t, Config{QueueSize: 3, Registerer: reg})
	sink := &memSink{}
	b.AddSink(sink)
	rec := b.NewRecorder(v1.EventSource{Component: Component, Host: "n"})
	for i := 0; i < 10; i++ { // not started: nothing drains the queue
		rec.Eventf(testPod("web"), v1.EventTypeNormal, "Pulled", "image %d", i)
	}
	if st := b.Stats(); st.Dropped != 7 || st.Recorded != 10 {
		t.Fatalf("stats %+v, want 10 recorded and 7 dropped", st)
	}
	if got := counterValue(t, reg, "minilet_events_dropped_total"); got != 7 {
		t.Fatalf("dropped metric %v, want 7", got)
	}
	b.Start(context.Background())
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if created, _ := sink.counts(); created != 3 {
		t.Fatalf("sink got %d, want the 3 queued", created)
	}
	if rec.Event(testPod("web"), v1.EventTypeNormal, "Late", "after shutdown"); b.Dropped() != 8 {
		t.Fatalf("dropped %d after a post-shutdown event, want 8", b.Dropped())
	}
	checkAccounting(t, b.Stats())
	if got := counterValue(t, reg, "minilet_events_dropped_total"); got != 8 {
		t.Fatalf("dropped metric %v, want 8", got)
	}
}

func TestBroadcasterShutdownFlushesQueue(t *testing.T) {
	b, _ := newTestBroadcaster(t, Config{})
	sink := &memSink{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	b.AddSink(sink)
	b.Start(context.Background())
	rec := b.NewRecorder(v1.EventSource{Component: Component, Host: "n"})
	for i := 0; i < 500; i++ {
		rec.Event(testPod(fmt.Sprintf("pod-%d", i)), v1.EventTypeNormal, "Created", "Created container app")
	}
	<-sink.entered // the first event is in the sink, the rest queued
	close(sink.gate)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if created, _ := sink.counts(); created != 500 {
		t.Fatalf("sink got %d of 500 queued events", created)
	}
	checkAccounting(t, b.Stats())
}

func TestBroadcasterShutdownDeadlineCountsTheRest(t *testing.T) {
	b, _ := newTestBroadcaster(t, Config{})
	sink := &memSink{gate: make(chan struct{}), entered: make(chan struct{}, 1)} // never opened
	b.AddSink(sink)
	b.Start(context.Background())
	rec := b.NewRecorder(v1.EventSource{Component: Component, Host: "n"})
	for i := 0; i < 20; i++ {
		rec.Event(testPod(fmt.Sprintf("pod-%d", i)), v1.EventTypeNormal, "Created", "Created container app")
	}
	<-sink.entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := b.Shutdown(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	st := b.Stats()
	checkAccounting(t, st)
	if st.Dropped != 19 || st.Delivered != 1 || st.SinkErrors != 1 {
		t.Fatalf("stats %+v, want 1 delivered (interrupted) and 19 dropped", st)
	}
	b.Stop() // idempotent
}

func TestBroadcasterStopsWithContext(t *testing.T) {
	b, _ := newTestBroadcaster(t, Config{})
	sink := &memSink{}
	b.AddSink(sink)
	ctx, cancel := context.WithCancel(context.Background())
	b.Start(ctx)
	rec := b.NewRecorder(v1.EventSource{Component: Component, Host: "n"})
	rec.Event(testPod("a"), v1.EventTypeNormal, "Created", "x")
	cancel()
	<-b.done
	if b.NewRecorder(v1.EventSource{}).Event(testPod("a"), v1.EventTypeNormal, "Late", "y"); b.Dropped() != 1 {
		t.Fatalf("dropped %d, want the late event counted", b.Dropped())
	}
	checkAccounting(t, b.Stats())
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); b.Stop() }()
	}
	wg.Wait()
}

func TestBroadcasterRemoveSink(t *testing.T) {
	b, _ := newTestBroadcaster(t, Config{})
	a, c := &memSink{}, &memSink{}
	b.AddSink(a)
	removeC := b.AddSink(c)
	removeC()
	b.Start(context.Background())
	b.NewRecorder(v1.EventSource{}).Event(testPod("a"), v1.EventTypeNormal, "Created", "x")
	b.Stop()
	if na, _ := a.counts(); na != 1 {
		t.Fatalf("remaining sink got %d", na)
	}
	if nc, _ := c.counts(); nc != 0 {
		t.Fatalf("removed sink got %d", nc)
	}
}

// Eight recorders race each other, the queue is small enough to overflow,
// and every event is still accounted for exactly.
func TestConcurrentRecordersExactAccounting(t *testing.T) {
	b, _ := newTestBroadcaster(t, Config{QueueSize: 64})
	sink := &memSink{}
	b.AddSink(sink)
	b.Start(context.Background())
	const workers, each = 8, 3000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := b.NewRecorder(v1.EventSource{Component: Component, Host: "n"})
			for i := 0; i < each; i++ {
				pod := testPod(fmt.Sprintf("pod-%d", i%50))
				switch i % 10 {
				case 0:
					rec.Eventf(pod, v1.EventTypeWarning, "Failed", "worker %d unique %d", w, i)
				case 1, 2:
					rec.Eventf(pod, v1.EventTypeWarning, "Unhealthy", "probe failed: %d", i%20)
				default:
					rec.Event(pod, v1.EventTypeNormal, "Pulled", "Container image already present")
				}
			}
		}()
	}
	wg.Wait()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := b.Stats()
	checkAccounting(t, st)
	if st.Recorded != workers*each {
		t.Fatalf("recorded %d, want %d", st.Recorded, workers*each)
	}
	created, updated := sink.counts()
	if uint64(created+updated) != st.Delivered {
		t.Fatalf("sink saw %d, broadcaster delivered %d", created+updated, st.Delivered)
	}
	if st.Filtered == 0 {
		t.Fatalf("stats %+v: expected the spam filter to act on 3000 events per pod", st)
	}
}

// A crash-looping container floods BackOff; the pod's Started and Killing
// events still reach the sinks, because filtered events never take a queue
// slot and the spam budget is per reason.
func TestNoisyReasonDoesNotStarveOthers(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, clk := newTestBroadcaster(t, Config{QueueSize: 100, Registerer: reg})
	sink := &memSink{}
	b.AddSink(sink)
	rec := b.NewRecorder(v1.EventSource{Component: Component, Host: "n"})
	pod := testPod("web")
	ref := ContainerRef(pod, "app")
	for i := 0; i < 5000; i++ { // not started yet: nothing drains the queue
		rec.Event(ref, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container app in pod web")
	}
	rec.Event(ref, v1.EventTypeNormal, "Started", "Started container app")
	rec.PastEventf(ref, metav1.NewTime(clk.Now().Add(-time.Minute)), v1.EventTypeNormal, "Killing", "Stopping container %s", "app")
	b.Start(context.Background())
	b.Stop()

	st := b.Stats()
	checkAccounting(t, st)
	if st.Dropped != 0 || st.Filtered != 5000-25 {
		t.Fatalf("stats %+v, want nothing dropped and all but 25 BackOffs filtered", st)
	}
	if got := counterValue(t, reg, "minilet_events_filtered_total"); got != 5000-25 {
		t.Fatalf("filtered metric %v", got)
	}
	var reasons []string
	for _, e := range append(sink.created, sink.updated...) {
		if e.Reason != "BackOff" {
			reasons = append(reasons, e.Reason)
			if e.Reason == "Killing" && !e.LastTimestamp.Time.Equal(clk.Now().Add(-time.Minute)) {
				t.Errorf("PastEventf timestamp %v", e.LastTimestamp)
			}
		}
	}
	if strings.Join(reasons, ",") != "Started,Killing" {
		t.Fatalf("non-BackOff events delivered: %v", reasons)
	}
	if last := sink.updated[len(sink.updated)-1]; last.Count != 25 {
		t.Fatalf("last BackOff update has count %d, want 25", last.Count)
	}
}
