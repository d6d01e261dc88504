package bench

// Cluster mode (issue 9): the real minilet binary joined to a real
// kube-apiserver and etcd on loopback (skipped unless MINILET_CLUSTER=1;
// the first run builds the API server).
//
//   - startup: pod created in the API server → the API server's copy shows
//     phase Running with its container running, seen through a watch as a
//     user's client would. Pods one after another, each deleted and gone
//     before the next; N is MINILET_CLUSTER_PODS (default 100). The
//     kubelet's SLO is 5 s p99.
//   - requests per pod lifecycle: the node's requests on pods, pods/status
//     and events (from the API server's audit log) over those N
//     lifecycles, divided by N. Node status and lease heartbeats are
//     reported separately per minute.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// clusterAgent starts an API server (opts) and one minilet joined to it
// as node <prefix>-<n>, logging at MINILET_BENCH_LOG (default info; its
// log is kept as saveAgentLog says), and waits until the node registered.
func clusterAgent(b *testing.B, prefix string, opts clustertest.Options) (*clustertest.Server, *harness.Agent) {
	b.Helper()
	srv := clustertest.Start(b, opts)
	a := harness.New(b)
	a.NodeName = fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1e6)
	level := os.Getenv("MINILET_BENCH_LOG")
	if level == "" {
		level = "info"
	}
	a.ExtraArgs = append(srv.AgentArgs(a.NodeName), "--log-level", level)
	a.Start()
	b.Cleanup(func() { saveAgentLog(b, a) })
	harness.Eventually(b, "node registered", func() (bool, string) {
		_, err := srv.Admin.CoreV1().Nodes().Get(context.Background(), a.NodeName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return srv, a
}

// nodePodWatch watches the pods bound to node; it stops with the
// benchmark.
func nodePodWatch(b *testing.B, srv *clustertest.Server, node string) watch.Interface {
	b.Helper()
	w, err := srv.Admin.CoreV1().Pods("default").Watch(context.Background(),
		metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	return w
}

// envInt is the positive integer in environment variable name, else def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func BenchmarkClusterPodStartup(b *testing.B) {
	requireRootB(b)
	clustertest.SkipUnlessEnabled(b)
	n := envInt("MINILET_CLUSTER_PODS", 100)
	srv, a := clusterAgent(b, "bench", clustertest.Options{})
	ctx := context.Background()
	pods := srv.Admin.CoreV1().Pods("default")
	w := nodePodWatch(b, srv, a.NodeName)
	user := "system:node:" + a.NodeName
	before := srv.AuditCounts(user)
	t0 := time.Now()

	var lat []time.Duration
	b.ResetTimer()
	for i := range n {
		name := fmt.Sprintf("p%03d", i)
		start := time.Now()
		_, err := pods.Create(ctx, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PodSpec{
				NodeName:                      a.NodeName,
				TerminationGracePeriodSeconds: ptr.To[int64](5),
				Containers:                    []v1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "1000"}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		waitWatch(b, w, name, func(e watch.Event, p *v1.Pod) bool {
			return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		})
		lat = append(lat, time.Since(start))
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		waitWatch(b, w, name, func(e watch.Event, _ *v1.Pod) bool { return e.Type == watch.Deleted })
	}
	b.StopTimer()
	elapsed := time.Since(t0)
	after := srv.AuditCounts(user)

	perPod, heartbeat := map[string]float64{}, map[string]float64{}
	total := 0.0
	for k, v := range after {
		d := float64(v - before[k])
		if d == 0 {
			continue
		}
		res := k[strings.Index(k, " ")+1:]
		switch res {
		case "pods", "pods/status", "events":
			perPod[k] = d / float64(n)
			total += d / float64(n)
		default:
			heartbeat[k] = d / elapsed.Minutes()
		}
	}
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(slices.Max(lat)), "max-ms")
	b.ReportMetric(total, "requests/pod")
	b.Logf("cluster startup: n=%d p50=%.0fms p99=%.0fms max=%.0fms; load %s", n,
		ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(slices.Max(lat)), loadavg())
	b.Logf("requests per pod lifecycle (%.1f in all): %s", total, fmtCounts(perPod))
	b.Logf("other requests per minute: %s", fmtCounts(heartbeat))
}

// waitWatch reads w until pod name's event satisfies ok (30 s at most).
func waitWatch(b *testing.B, w watch.Interface, name string, ok func(watch.Event, *v1.Pod) bool) {
	b.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, open := <-w.ResultChan():
			if !open {
				b.Fatal("pod watch closed")
			}
			if e.Type == watch.Error {
				b.Fatalf("pod watch: %v", apierrors.FromObject(e.Object))
			}
			p, isPod := e.Object.(*v1.Pod)
			if isPod && p.Name == name && ok(e, p) {
				return
			}
		case <-timeout:
			b.Fatalf("pod %s: no matching watch event within 30s", name)
		}
	}
}

func fmtCounts(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// BenchmarkClusterCrashLoopEvents counts the event writes (creates and
// patches, from the audit log) a crash-looping pod costs the API server
// over MINILET_CLUSTER_CRASHLOOP (default 10m, as the issue asks), with
// the restarts it made meanwhile. Correlation should keep this to a few
// writes per restart at most.
func BenchmarkClusterCrashLoopEvents(b *testing.B) {
	requireRootB(b)
	clustertest.SkipUnlessEnabled(b)
	dur := 10 * time.Minute
	if v, err := time.ParseDuration(os.Getenv("MINILET_CLUSTER_CRASHLOOP")); err == nil && v > 0 {
		dur = v
	}
	srv, a := clusterAgent(b, "crash", clustertest.Options{})
	ctx := context.Background()
	user := "system:node:" + a.NodeName
	before := srv.AuditCounts(user)
	b.ResetTimer()
	_, err := srv.Admin.CoreV1().Pods("default").Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crasher"},
		Spec: v1.PodSpec{
			NodeName:   a.NodeName,
			Containers: []v1.Container{{Name: "c", Image: "host", Command: []string{"sh", "-c", "exit 1"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(dur) // a fixed observation window: what is measured is what happens in it
	b.StopTimer()
	after := srv.AuditCounts(user)
	p, err := srv.Admin.CoreV1().Pods("default").Get(ctx, "crasher", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	restarts := int32(0)
	if len(p.Status.ContainerStatuses) == 1 {
		restarts = p.Status.ContainerStatuses[0].RestartCount
	}
	creates := after["create events"] - before["create events"]
	patches := after["patch events"] - before["patch events"]
	b.ReportMetric(float64(creates+patches), "event-writes")
	b.ReportMetric(float64(restarts), "restarts")
	b.Logf("crash loop over %s: %d restarts, %d event creates + %d event patches, %d status patches",
		dur, restarts, creates, patches, after["patch pods/status"]-before["patch pods/status"])
}
