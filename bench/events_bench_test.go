package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// The like-for-like events benchmark: the same 100,000-event workload
// through minilet's pipeline and through client-go's broadcaster, each in
// a fresh child process (this test binary again), so that the peak RSS of
// one is not the other's and both are measured the same way (VmHWM of the
// child, with its VmRSS before the workload as the baseline). Two modes:
//
//   - burst: 8 goroutines record the whole workload as fast as they can;
//     the clock stops when the pipeline has shut down with everything it
//     kept delivered. Throughput is events per wall second.
//   - paced: one goroutine records 100 events every 5 ms (20,000/s, 5 s),
//     a steady load client-go's single sink goroutine can mostly absorb
//     (at 50,000/s it dropped two thirds). Throughput is events per CPU
//     second of the child (user+system), so it measures cost, not the
//     pace.
//
// Both count, per run: recorded; dropped (never reached the correlator:
// minilet's Stats, and for client-go the events that did not reach its
// spam filter, counted through a spam key function equal to its
// default); filtered (eaten by the spam filter); delivered (sink writes).
// events/s counts every recorded event, dropped or not; kept-events/s only
// those that were not dropped.
//
//	go test -run '^$' -bench EventsLikeForLike -benchtime 3x ./bench/

const (
	childEnv    = "MINILET_EVENTS_CHILD" // "<pipeline>/<mode>" in the child
	pacedBatch  = 100
	pacedPeriod = 5 * time.Millisecond
)

type childResult struct {
	Recorded, Dropped, Filtered, Delivered int64
	WallSeconds, CPUSeconds                float64
	BaseRSSMiB, PeakRSSMiB                 float64
}

func BenchmarkEventsLikeForLike(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"burst", "paced"} {
		for _, pipeline := range []string{"minilet", "client-go"} {
			b.Run(mode+"/"+pipeline, func(b *testing.B) {
				var sum childResult
				peak := 0.0
				for i := 0; i < b.N; i++ {
					r := runChild(b, self, pipeline+"/"+mode)
					if r.Recorded != workloadEvents || r.Recorded != r.Dropped+r.Filtered+r.Delivered {
						b.Fatalf("unaccounted events: %+v", r)
					}
					sum.Dropped += r.Dropped
					sum.Filtered += r.Filtered
					sum.Delivered += r.Delivered
					sum.WallSeconds += r.WallSeconds
					sum.CPUSeconds += r.CPUSeconds
					peak = max(peak, r.PeakRSSMiB)
					sum.BaseRSSMiB = max(sum.BaseRSSMiB, r.BaseRSSMiB)
				}
				n := float64(b.N)
				events := n * workloadEvents
				b.ReportMetric(events/sum.WallSeconds, "events/s")
				b.ReportMetric(events/sum.CPUSeconds, "events/cpu-s")
				// Events that were not dropped: correlated, then filtered or
				// delivered.
				b.ReportMetric((events-float64(sum.Dropped))/sum.WallSeconds, "kept-events/s")
				b.ReportMetric(float64(sum.Dropped)/n, "dropped/op")
				b.ReportMetric(float64(sum.Filtered)/n, "filtered/op")
				b.ReportMetric(float64(sum.Delivered)/n, "delivered/op")
				b.ReportMetric(peak, "peak-RSS-MiB")
				b.ReportMetric(sum.BaseRSSMiB, "base-RSS-MiB")
				b.ReportMetric(peak-sum.BaseRSSMiB, "RSS-growth-MiB")
			})
		}
	}
}

func runChild(b *testing.B, self, what string) childResult {
	b.Helper()
	cmd := exec.Command(self, "-test.run", "^TestEventsLikeForLikeChild$", "-test.count", "1")
	cmd.Env = append(os.Environ(), childEnv+"="+what)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("child %s: %v\n%s", what, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if j, ok := strings.CutPrefix(line, "RESULT "); ok {
			var r childResult
			if err := json.Unmarshal([]byte(j), &r); err != nil {
				b.Fatal(err)
			}
			return r
		}
	}
	b.Fatalf("child %s printed no result:\n%s", what, out)
	return childResult{}
}

// TestEventsLikeForLikeChild is the child's side; it does nothing unless
// started by BenchmarkEventsLikeForLike.
func TestEventsLikeForLikeChild(t *testing.T) {
	what := os.Getenv(childEnv)
	if what == "" {
		t.Skip("run by BenchmarkEventsLikeForLike")
	}
	pipeline, mode, _ := strings.Cut(what, "/")
	quietKlog()
	_ = workload[0] // built before the baseline
	base := rssMiB("VmRSS:")
	cpu0 := cpuSeconds()
	start := time.Now()
	var r childResult
	switch pipeline {
	case "minilet":
		r = runMinilet(t, mode)
	case "client-go":
		r = runClientGo(t, mode)
	default:
		t.Fatalf("unknown pipeline %q", pipeline)
	}
	r.WallSeconds = time.Since(start).Seconds()
	r.CPUSeconds = cpuSeconds() - cpu0
	r.BaseRSSMiB, r.PeakRSSMiB = base, rssMiB("VmHWM:")
	j, _ := json.Marshal(r)
	fmt.Printf("RESULT %s\n", j)
}

// produce records the workload in mode through record.
func produce(mode string, record func(it *workItem)) {
	switch mode {
	case "burst":
		const workers = 8
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := w; j < workloadEvents; j += workers {
					record(&workload[j])
				}
			}()
		}
		wg.Wait()
	case "paced":
		t := time.NewTicker(pacedPeriod)
		defer t.Stop()
		for i := 0; i < workloadEvents; i += pacedBatch {
			for j := i; j < min(i+pacedBatch, workloadEvents); j++ {
				record(&workload[j])
			}
			<-t.C
		}
	default:
		panic("unknown mode " + mode)
	}
}

func runMinilet(t *testing.T, mode string) childResult {
	sink := oursSink{&countingSink{}}
	br, err := events.NewBroadcaster(events.Config{}, clock.RealClock{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	br.AddSink(sink)
	br.Start(context.Background())
	rec := br.NewRecorder(v1.EventSource{Component: events.Component, Host: "bench"})
	produce(mode, func(it *workItem) { rec.Event(it.pod, it.eventtype, it.reason, it.message) })
	br.Stop()
	st := br.Stats()
	if uint64(sink.total()) != st.Delivered {
		t.Fatalf("sink saw %d, stats say %d delivered", sink.total(), st.Delivered)
	}
	return childResult{Recorded: int64(st.Recorded), Dropped: int64(st.Dropped), Filtered: int64(st.Filtered), Delivered: sink.total()}
}

// clientGoSpamKey is client-go's default spam key (source, involved
// object, type); used to count the events that reach its correlator.
func clientGoSpamKey(ev *v1.Event) string {
	o := &ev.InvolvedObject
	return strings.Join([]string{ev.Source.Component, ev.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion, ev.Type}, "")
}

func runClientGo(t *testing.T, mode string) childResult {
	sink := upstreamSink{&countingSink{}}
	base := runtime.NumGoroutine()
	var reached atomic.Int64
	br := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		SpamKeyFunc: func(ev *v1.Event) string { reached.Add(1); return clientGoSpamKey(ev) },
	}))
	br.StartRecordingToSink(sink)
	rec := br.NewRecorder(scheme.Scheme, v1.EventSource{Component: events.Component, Host: "bench"})
	produce(mode, func(it *workItem) { rec.Event(it.pod, it.eventtype, it.reason, it.message) })
	br.Shutdown()
	// Shutdown stops distribution; the sink goroutine drains its channel
	// and ends. Poll for that, with a generous deadline.
	deadline := time.Now().Add(60 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("client-go's goroutines still running: %d, want %d", runtime.NumGoroutine(), base)
		}
		time.Sleep(100 * time.Microsecond)
	}
	delivered := sink.total()
	return childResult{Recorded: workloadEvents, Dropped: workloadEvents - reached.Load(), Filtered: reached.Load() - delivered, Delivered: delivered}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// rssMiB reads a VmRSS/VmHWM line of /proc/self/status, in MiB.
func rssMiB(field string) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%f kB", &kb); err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}
