package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/events"
)

// The workload: 100,000 events about 50 pods; 70 % exact repeats, 20 %
// similar (same reason, one of 20 messages), 10 % unique messages.
const (
	workloadEvents = 100_000
	workloadPods   = 50
)

type workItem struct {
	pod       *v1.Pod
	eventtype string
	reason    string
	message   string
}

var workload = func() []workItem {
	pods := make([]*v1.Pod, workloadPods)
	for i := range pods {
		name := "pod-" + strconv.Itoa(i)
		pods[i] = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name, UID: types.UID("uid-" + name)}}
	}
	items := make([]workItem, workloadEvents)
	for i := range items {
		it := workItem{pod: pods[(i/10)%workloadPods]} // every pod sees every kind
		switch i % 10 {
		case 7, 8:
			it.eventtype, it.reason, it.message = v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: "+strconv.Itoa(500+i%20)
		case 9:
			it.eventtype, it.reason, it.message = v1.EventTypeWarning, "Failed", "Error: container exited with code "+strconv.Itoa(i)
		default:
			it.eventtype, it.reason, it.message = v1.EventTypeNormal, "Pulled", `Container image "host" already present on machine`
		}
		items[i] = it
	}
	return items
}()

func quietKlog() { klog.SetLogger(logr.Discard()) }

// countingSink is an in-memory sink that only counts (for both pipelines).
type countingSink struct{ creates, updates, patches atomic.Int64 }

func (s *countingSink) total() int64 { return s.creates.Load() + s.updates.Load() + s.patches.Load() }

// ours
func (s *countingSink) create(ev *v1.Event) (*v1.Event, error) { s.creates.Add(1); return ev, nil }

type oursSink struct{ *countingSink }

func (s oursSink) Create(_ context.Context, ev *v1.Event) (*v1.Event, error) { return s.create(ev) }
func (s oursSink) Update(_ context.Context, ev *v1.Event) (*v1.Event, error) {
	s.updates.Add(1)
	return ev, nil
}

// client-go's record.EventSink
type upstreamSink struct{ *countingSink }

func (s upstreamSink) Create(ev *v1.Event) (*v1.Event, error) { return s.create(ev) }
func (s upstreamSink) Update(ev *v1.Event) (*v1.Event, error) { s.updates.Add(1); return ev, nil }
func (s upstreamSink) Patch(ev *v1.Event, _ []byte) (*v1.Event, error) {
	s.patches.Add(1)
	return ev, nil
}

// expected is how many sink writes a lossless pipeline makes for the
// workload: the correlator run synchronously on the same events.
var (
	expectedOnce             sync.Once
	expectedOurs, expectedUp int64
)

func expectedWrites() (ours, upstream int64) {
	expectedOnce.Do(func() {
		clk := clocktesting.NewFakeClock(time.Now())
		oc, err := events.NewCorrelator(events.CorrelatorConfig{}, clk)
		if err != nil {
			panic(err)
		}
		uc := record.NewEventCorrelator(clk)
		src := v1.EventSource{Component: events.Component, Host: "bench"}
		for i, it := range workload {
			ref, _ := events.Reference(it.pod)
			mk := func() *v1.Event {
				return &v1.Event{
					ObjectMeta:     metav1.ObjectMeta{Name: it.pod.Name + "." + strconv.Itoa(i), Namespace: "bench"},
					InvolvedObject: ref, Source: src, Type: it.eventtype, Reason: it.reason, Message: it.message,
					FirstTimestamp: metav1.NewTime(clk.Now()), LastTimestamp: metav1.NewTime(clk.Now()), Count: 1,
					ReportingController: src.Component, ReportingInstance: src.Host,
				}
			}
			if !oc.Correlate(mk()).Skip {
				expectedOurs++
			}
			if res, _ := uc.EventCorrelate(mk()); !res.Skip {
				expectedUp++
			}
		}
	})
	return expectedOurs, expectedUp
}

// measure runs fn b.N times and reports per-event figures.
func measure(b *testing.B, fn func() (written int64)) {
	b.Helper()
	quietKlog()
	_, _ = expectedWrites()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	base := runtime.NumGoroutine()
	peak := base
	b.ResetTimer()
	start := time.Now()
	var written int64
	for i := 0; i < b.N; i++ {
		written += fn()
		if g := runtime.NumGoroutine(); g > peak {
			peak = g
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&after)
	n := float64(b.N) * workloadEvents
	b.ReportMetric(float64(elapsed.Nanoseconds())/n, "ns/event")
	b.ReportMetric(n/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/event")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/event")
	b.ReportMetric(float64(written)/float64(b.N), "writes/op")
	_ = peak
}

// BenchmarkEventsPipeline feeds the workload through each recorder,
// broadcaster, correlator and an in-memory sink, and waits until
// everything is written. "lost/op" counts events that a lossless run
// would have written but did not (dropped in the queues).
func BenchmarkEventsPipeline(b *testing.B) {
	b.Run("minilet", func(b *testing.B) {
		exp, _ := expectedWrites()
		var lost, dropped int64
		peak := 0
		measure(b, func() int64 {
			sink := oursSink{&countingSink{}}
			br, err := events.NewBroadcaster(events.Config{}, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				b.Fatal(err)
			}
			br.AddSink(sink)
			base := runtime.NumGoroutine()
			br.Start(context.Background())
			rec := br.NewRecorder(v1.EventSource{Component: events.Component, Host: "bench"})
			for i, it := range workload {
				rec.Event(it.pod, it.eventtype, it.reason, it.message)
				if i%1024 == 0 {
					peak = max(peak, runtime.NumGoroutine()-base)
				}
			}
			br.Stop()
			st := br.Stats()
			if st.Recorded != st.Dropped+st.Filtered+st.Delivered || uint64(sink.total()) != st.Delivered {
				b.Fatalf("unaccounted events: %+v, sink saw %d", st, sink.total())
			}
			dropped += int64(st.Dropped)
			lost += exp - sink.total()
			return sink.total()
		})
		b.ReportMetric(float64(lost)/float64(b.N), "lost/op")
		b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
		b.ReportMetric(float64(peak), "peak-goroutines")
	})
	b.Run("client-go", func(b *testing.B) {
		_, exp := expectedWrites()
		var lost int64
		peak := 0
		measure(b, func() int64 {
			sink := upstreamSink{&countingSink{}}
			base := runtime.NumGoroutine()
			br := record.NewBroadcaster()
			br.StartRecordingToSink(sink)
			rec := br.NewRecorder(scheme.Scheme, v1.EventSource{Component: events.Component, Host: "bench"})
			for i, it := range workload {
				rec.Event(it.pod, it.eventtype, it.reason, it.message)
				if i%1024 == 0 {
					peak = max(peak, runtime.NumGoroutine()-base)
				}
			}
			br.Shutdown()
			waitGoroutines(b, base) // the sink goroutine ends once it has drained its channel
			lost += exp - sink.total()
			return sink.total()
		})
		b.ReportMetric(float64(lost)/float64(b.N), "lost/op")
		b.ReportMetric(float64(peak), "peak-goroutines")
	})
}

func waitGoroutines(b *testing.B, n int) {
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			b.Fatalf("%d goroutines still running, want %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// BenchmarkEventsBurst records 100,000 events from 8 goroutines as fast as
// they can (far faster than one second) into minilet's pipeline and reports
// how many were dropped (exactly: recorded = dropped + filtered +
// delivered), the heap in use right after the burst and the process's
// peak RSS (meaningful when this benchmark runs alone:
// -bench EventsBurst).
func BenchmarkEventsBurst(b *testing.B) {
	quietKlog()
	const workers = 8
	var dropped, delivered, filtered uint64
	var elapsed time.Duration
	var heapMiB float64
	for i := 0; i < b.N; i++ {
		sink := oursSink{&countingSink{}}
		br, err := events.NewBroadcaster(events.Config{}, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			b.Fatal(err)
		}
		br.AddSink(sink)
		br.Start(context.Background())
		rec := br.NewRecorder(v1.EventSource{Component: events.Component, Host: "bench"})
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := w; j < workloadEvents; j += workers {
					it := &workload[j]
					rec.Event(it.pod, it.eventtype, it.reason, it.message)
				}
			}()
		}
		wg.Wait()
		elapsed += time.Since(start)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapMiB = max(heapMiB, float64(ms.HeapInuse)/(1<<20))
		br.Stop()
		st := br.Stats()
		if st.Recorded != workloadEvents || st.Recorded != st.Dropped+st.Filtered+st.Delivered || uint64(sink.total()) != st.Delivered {
			b.Fatalf("unaccounted events: %+v, sink saw %d", st, sink.total())
		}
		dropped += st.Dropped
		delivered += st.Delivered
		filtered += st.Filtered
	}
	n := float64(b.N)
	b.ReportMetric(float64(elapsed.Milliseconds())/n, "burst-ms")
	b.ReportMetric(float64(dropped)/n, "dropped/op")
	b.ReportMetric(float64(filtered)/n, "filtered/op")
	b.ReportMetric(float64(delivered)/n, "delivered/op")
	b.ReportMetric(heapMiB, "heap-inuse-MiB")
	b.ReportMetric(peakRSSMiB(), "peak-RSS-MiB") // the whole test process: run this benchmark alone
}

// peakRSSMiB is the process's high-water RSS (VmHWM), or 0 if unknown.
func peakRSSMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%f kB", &kb); err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}
