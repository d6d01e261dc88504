package bench

// Cluster mode, pods created at once (issue 15): N pods created in the API
// server together, all bound to one minilet node (the real binary, joined
// to a real kube-apiserver and etcd on loopback; skipped unless
// MINILET_CLUSTER=1), each timed from just before its create call to the
// moment a watch shows the API server's copy in phase Running with its
// container running. Sub-benchmarks for 30 and 110 pods (110 is the
// kubelet's and the agent's default maxPods). Goal p99 < 1 s; the
// kubelet's SLO is 5 s p99. started-* is the same clock up to the agent's
// log line "started container" (info level, ms precision): the node's
// runtime work without its status report.
//
// Requests per pod start are the node's requests on pods, pods/status and
// events (from the API server's audit log) from the first create until
// the node has gone quiet after the last pod was Running, divided by N;
// the teardown's are reported apart. Node status and lease heartbeats are
// left out, as in BenchmarkClusterPodStartup.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// burstTimeout bounds each wait of the burst benchmark (all Running, all
// gone, the audit log quiet). It only keeps a broken run from hanging; it
// is not a target.
const burstTimeout = 5 * time.Minute

func BenchmarkClusterPodStartupBurst(b *testing.B) {
	requireRootB(b)
	clustertest.SkipUnlessEnabled(b)
	srv, a := clusterAgent(b, "burst", clustertest.Options{})
	for _, n := range []int{30, 110} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			var lat, started []time.Duration
			var wall time.Duration
			var start, stop float64
			b.StopTimer() // clusterBurst times the bursts alone
			for i := range b.N {
				r := clusterBurst(b, srv, a, n, fmt.Sprintf("b%d-%d", n, i))
				lat = append(lat, r.lat...)
				started = append(started, r.started...)
				start += r.startReqs
				stop += r.stopReqs
				wall = max(wall, r.allRunning)
			}
			runs := float64(b.N)
			b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
			b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
			b.ReportMetric(ms(slices.Max(lat)), "max-ms")
			b.ReportMetric(ms(wall), "all-running-ms")
			if len(started) > 0 {
				b.ReportMetric(ms(percentile(started, 0.5)), "started-p50-ms")
				b.ReportMetric(ms(percentile(started, 0.99)), "started-p99-ms")
			}
			b.ReportMetric(start/runs, "requests/pod-start")
			b.ReportMetric(stop/runs, "requests/pod-stop")
			b.Logf("the node's requests so far, by response code: %v", srv.AuditCodes("system:node:"+a.NodeName, 0))
		})
	}
}

// burstResult is one burst's figures.
type burstResult struct {
	lat        []time.Duration
	started    []time.Duration // create → the agent logged the container started
	allRunning time.Duration   // first create → last pod Running
	startReqs  float64         // the node's requests per pod start
	stopReqs   float64         // and per pod stop
}

// clusterBurst creates n pods at once on a's node, waits until every one
// is Running in the API server, then deletes them all and waits until
// they are gone.
func clusterBurst(b *testing.B, srv *clustertest.Server, a *harness.Agent, n int, tag string) burstResult {
	b.Helper()
	ctx := context.Background()
	node := a.NodeName
	pods := srv.Admin.CoreV1().Pods("default")
	checkPodCapacity(b, srv.Admin, node, n)
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	// Read the watch from now on, whatever the benchmark is doing: the API
	// server closes a watch whose reader falls behind, and n creates make
	// several events each before the first one is looked at.
	events := pumpWatch(w, 16*n)
	user := "system:node:" + node
	before := srv.AuditCounts(user)

	// Each pod's clock starts just before its own create call, which all
	// n goroutines make at once (the admin client has no rate limit).
	var mu sync.Mutex
	created := map[string]time.Time{}
	running := map[string]time.Time{}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", tag, i)
	}
	b.StartTimer()
	t0 := time.Now()
	errs := make(chan error, n)
	for _, name := range names {
		go func() {
			mu.Lock()
			created[name] = time.Now()
			mu.Unlock()
			_, err := pods.Create(ctx, burstPod(name, node, tag), metav1.CreateOptions{})
			errs <- err
		}()
	}
	for range names {
		if err := <-errs; err != nil {
			b.Fatalf("create: %v", err)
		}
	}
	readWatch(b, events, func(e watch.Event, p *v1.Pod) bool {
		if _, seen := running[p.Name]; !seen && e.Type != watch.Deleted && podRunningInAPI(p) {
			running[p.Name] = time.Now()
		}
		return len(running) == n
	})
	b.StopTimer()
	var r burstResult
	var last time.Time
	for _, name := range names {
		at, ok := running[name]
		if !ok {
			b.Fatalf("pod %s never seen Running", name)
		}
		r.lat = append(r.lat, at.Sub(created[name]))
		if at.After(last) {
			last = at
		}
	}
	r.allRunning = last.Sub(t0)
	// The agent's own view, to tell its runtime work from its status
	// reports: when it logged each container started (info level).
	starts := containerStarts(a.Logs(), tag)
	for _, name := range names {
		if at, ok := starts[name]; ok {
			r.started = append(r.started, at.Sub(created[name]))
		}
	}
	if len(r.started) != n {
		b.Logf("the agent's log shows %d of %d containers started; no started-* figures", len(r.started), n)
		r.started = nil
	}
	// Status patches and events may still be on their way; count once the
	// node's requests have stopped changing.
	mid := auditQuiet(b, srv, user)
	startPer, startBy := nodePodRequests(before, mid, n)

	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{"bench": tag}).String(),
	}); err != nil {
		b.Fatal(err)
	}
	gone := map[string]bool{}
	tDel := time.Now()
	readWatch(b, events, func(e watch.Event, p *v1.Pod) bool {
		if e.Type == watch.Deleted && strings.HasPrefix(p.Name, tag+"-") {
			gone[p.Name] = true
		}
		return len(gone) == n
	})
	allGone := time.Since(tDel)
	after := auditQuiet(b, srv, user)
	stopPer, stopBy := nodePodRequests(mid, after, n)

	r.startReqs, r.stopReqs = startPer, stopPer
	b.Logf("burst of %d: p50=%.0fms p99=%.0fms max=%.0fms, all Running %.0fms after the first create; all gone %.0fms after the delete; load %s",
		n, ms(percentile(r.lat, 0.5)), ms(percentile(r.lat, 0.99)), ms(slices.Max(r.lat)), ms(r.allRunning), ms(allGone), loadavg())
	if len(r.started) > 0 {
		b.Logf("containers started (the agent's log, ms precision): p50=%.0fms p99=%.0fms", ms(percentile(r.started, 0.5)), ms(percentile(r.started, 0.99)))
	}
	b.Logf("requests per pod start (%.2f): %s", startPer, fmtCounts(startBy))
	b.Logf("requests per pod stop (%.2f): %s", stopPer, fmtCounts(stopBy))
	return r
}

func burstPod(name, node, tag string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": tag}},
		Spec: v1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers:                    []v1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "1000"}}},
		},
	}
}

// podRunningInAPI is what the startup benchmarks wait for: phase Running
// with the one container running.
func podRunningInAPI(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
}

// checkPodCapacity fails b unless node can take n more pods than it runs.
func checkPodCapacity(b *testing.B, c kubernetes.Interface, node string, n int) {
	b.Helper()
	ctx := context.Background()
	nd, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	capacity := nd.Status.Allocatable.Pods().Value()
	list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		b.Fatal(err)
	}
	busy := 0
	for _, p := range list.Items {
		if p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			busy++
		}
	}
	if int64(busy+n) > capacity {
		b.Fatalf("node %s allocatable pods %d, already running %d: no room for %d more (raise --max-pods)", node, capacity, busy, n)
	}
}

// pumpWatch copies w's events into a channel of capacity size as fast as
// they come; the channel closes when w's does.
func pumpWatch(w watch.Interface, size int) <-chan watch.Event {
	out := make(chan watch.Event, size)
	go func() {
		defer close(out)
		for e := range w.ResultChan() {
			out <- e
		}
	}()
	return out
}

// readWatch feeds pod events to done until it returns true.
func readWatch(b *testing.B, events <-chan watch.Event, done func(watch.Event, *v1.Pod) bool) {
	b.Helper()
	timeout := time.After(burstTimeout)
	for {
		select {
		case e, open := <-events:
			if !open {
				b.Fatal("pod watch closed")
			}
			if e.Type == watch.Error {
				b.Fatalf("pod watch: %v", apierrors.FromObject(e.Object))
			}
			if p, isPod := e.Object.(*v1.Pod); isPod && done(e, p) {
				return
			}
		case <-timeout:
			b.Fatalf("pod watch: not done within %s", burstTimeout)
		}
	}
}

// auditQuiet returns user's request counts once its requests on pods,
// pods/status and events have not changed for two seconds.
func auditQuiet(b *testing.B, srv *clustertest.Server, user string) map[string]int {
	b.Helper()
	deadline := time.Now().Add(burstTimeout)
	last := srv.AuditCounts(user)
	for stable := time.Now(); time.Since(stable) < 2*time.Second; {
		if time.Now().After(deadline) {
			b.Fatalf("the node's requests did not settle within %s", burstTimeout)
		}
		time.Sleep(500 * time.Millisecond)
		cur := srv.AuditCounts(user)
		if !maps.Equal(podRequests(cur), podRequests(last)) {
			stable = time.Now()
		}
		last = cur
	}
	return last
}

// podRequests keeps the counts of requests on pods, pods/status and
// events (heartbeats go on regardless, so auditQuiet ignores them).
func podRequests(counts map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range counts {
		if isPodRequest(k) {
			out[k] = v
		}
	}
	return out
}

func isPodRequest(key string) bool {
	switch key[strings.Index(key, " ")+1:] {
	case "pods", "pods/status", "events":
		return true
	}
	return false
}

// nodePodRequests is the node's requests on pods, pods/status and events
// between two audit counts, per pod, in all and by kind.
func nodePodRequests(before, after map[string]int, n int) (float64, map[string]float64) {
	by := map[string]float64{}
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d != 0 && isPodRequest(k) {
			by[k] = float64(d) / float64(n)
			total += float64(d) / float64(n)
		}
	}
	return total, by
}

// containerStarts reads the agent's log lines `msg="started container"`
// (time=RFC 3339, pod=NAME_NAMESPACE(UID)) for the pods named tag-*.
func containerStarts(logs, tag string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `msg="started container"`) {
			continue
		}
		var at time.Time
		var pod string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "time="); ok {
				at, _ = time.Parse(time.RFC3339Nano, v)
			} else if v, ok := strings.CutPrefix(f, "pod="); ok {
				pod, _, _ = strings.Cut(v, "_")
			}
		}
		if _, seen := out[pod]; !seen && !at.IsZero() && strings.HasPrefix(pod, tag+"-") {
			out[pod] = at
		}
	}
	return out
}
