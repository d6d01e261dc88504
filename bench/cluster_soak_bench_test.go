package bench

// Cluster-mode soak (issue 15): one minilet node (the real binary, default
// configuration, as the kubelet's defaults) under the full upstream control
// plane (kube-apiserver, etcd, kube-controller-manager, kube-scheduler) for
// MINILET_SOAK (e.g. 30m; skipped when unset, so CI never runs it), while
// pods are churned: MINILET_SOAK_RATE (default 50) pods created a minute,
// each placed by the scheduler and deleted soakPodLifetime after its
// creation, so about 25 live at a time.
//
// What must hold, and is checked: the node's Ready condition is True at
// every look (every 5 s; the controller-manager turns it Unknown when the
// node's Lease and status go stale), and no status write of the node fails
// (the agent's warnings "node status not written", "node lease not
// renewed" and "pod status not written"; the node's failed requests in the
// API server's audit log are listed beside them). What is reported: the
// agent's RSS (VmRSS, and RssAnon: its own heap without the binary's text)
// with no pods, one minute into the churn and at the end, sampled every
// minute in between; its goroutines; the Lease's largest age; pods created,
// seen Running, and not Running at their deletion.
//
//   MINILET_CLUSTER=1 MINILET_SOAK=30m go test -run '^$' -bench ClusterSoak \
//     -benchtime 1x -timeout 45m -v ./bench/

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// soakPodLifetime is how long each churned pod lives before it is deleted.
const soakPodLifetime = 30 * time.Second

// soakLook is how often the node's Ready condition and Lease are read.
const soakLook = 5 * time.Second

// The agent's warnings for status writes that failed.
var soakFailures = []string{"node status not written", "node lease not renewed", "pod status not written"}

func BenchmarkClusterSoak(b *testing.B) {
	requireRootB(b)
	raw := os.Getenv("MINILET_SOAK")
	if raw == "" {
		b.Skip("soak: set MINILET_SOAK to a duration, e.g. MINILET_SOAK=30m (and MINILET_CLUSTER=1)")
	}
	soak, err := time.ParseDuration(raw)
	if err != nil || soak <= 0 {
		b.Fatalf("MINILET_SOAK=%q: not a positive duration (%v)", raw, err)
	}
	rate := 50
	if v, err := strconv.Atoi(os.Getenv("MINILET_SOAK_RATE")); err == nil && v > 0 {
		rate = v
	}
	clustertest.SkipUnlessEnabled(b)
	srv, a := clusterAgent(b, "soak", clustertest.Options{ControlPlane: true})
	ctx := context.Background()
	nodes := srv.Admin.CoreV1().Nodes()
	leases := srv.Admin.CoordinationV1().Leases("kube-node-lease")
	pods := srv.Admin.CoreV1().Pods("default")

	// The scheduler places pods only on a Ready node without the
	// not-ready taint, which the controller-manager takes off.
	harness.Eventually(b, "the node Ready and untainted", func() (bool, string) {
		n, err := nodes.Get(ctx, a.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if st, why := nodeReady(n); st != v1.ConditionTrue {
			return false, why
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == v1.TaintNodeNotReady {
				return false, "still tainted " + taint.Key
			}
		}
		return true, ""
	})
	pid, ok := agentPid(a.RootDir)
	if !ok {
		b.Fatal("the agent's process not found")
	}
	b.Logf("soak: %s, %d pods/min, each living %s; load at start %s", soak, rate, soakPodLifetime, loadavg())
	var samples []memSample
	sample := func(at time.Duration) memSample {
		s := memSample{at: at.Round(time.Second), rss: procKB(pid, "VmRSS"), anon: procKB(pid, "RssAnon"), goroutines: agentGoroutines(a)}
		samples = append(samples, s)
		return s
	}
	idle := sample(0)

	b.ResetTimer()
	start := time.Now()
	churnCtx, stopChurn := context.WithCancel(ctx)
	var st churnStats
	var wg sync.WaitGroup
	wg.Go(func() { churn(churnCtx, b, pods, rate, &st) })

	var notReady []string
	var maxLeaseAge time.Duration
	var warm memSample
	nextSample := time.Minute
	for time.Since(start) < soak {
		time.Sleep(soakLook)
		el := time.Since(start)
		n, err := nodes.Get(ctx, a.NodeName, metav1.GetOptions{})
		if err != nil {
			notReady = append(notReady, fmt.Sprintf("%s: getting the node: %v", el.Round(time.Second), err))
		} else if s, why := nodeReady(n); s != v1.ConditionTrue {
			notReady = append(notReady, fmt.Sprintf("%s: %s", el.Round(time.Second), why))
		}
		if l, err := leases.Get(ctx, a.NodeName, metav1.GetOptions{}); err == nil {
			maxLeaseAge = max(maxLeaseAge, leaseAge(l))
		}
		if el >= nextSample {
			s := sample(el)
			if warm.at == 0 {
				warm = s
			}
			nextSample += time.Minute
		}
	}
	stopChurn()
	wg.Wait()
	churned := time.Since(start)
	end := sample(churned)
	b.StopTimer()

	// Delete what the churn left and wait until it is gone.
	sel := labels.SelectorFromSet(labels.Set{"bench": "soak"}).String()
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		b.Fatal(err)
	}
	harness.Eventually(b, "the churned pods gone", func() (bool, string) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items))
	})

	logs := a.Logs()
	failed := map[string]int{}
	var firstFailure string
	for _, line := range strings.Split(logs, "\n") {
		for _, f := range soakFailures {
			if strings.Contains(line, f) {
				failed[f]++
				if firstFailure == "" {
					firstFailure = line
				}
			}
		}
	}
	refused := srv.AuditCodes("system:node:"+a.NodeName, 400)

	b.ReportMetric(mib(idle.rss), "rss-idle-MiB")
	b.ReportMetric(mib(warm.rss), "rss-start-MiB")
	b.ReportMetric(mib(end.rss), "rss-end-MiB")
	b.ReportMetric(mib(warm.anon), "anon-start-MiB")
	b.ReportMetric(mib(end.anon), "anon-end-MiB")
	b.ReportMetric(float64(len(notReady)), "not-ready-looks")
	b.ReportMetric(float64(failed[soakFailures[0]]+failed[soakFailures[1]]+failed[soakFailures[2]]), "failed-status-writes")
	b.ReportMetric(float64(st.created)/churned.Minutes(), "pods/min")
	b.Logf("soak over %s: %d pods created, %d deleted, %d seen Running at deletion, %d not (first: %s), %d create/delete errors; load at end %s",
		soak, st.created, st.deleted, st.running, len(st.notRunning), firstOr(st.notRunning), st.errors, loadavg())
	b.Logf("node: %d looks at Ready not True (first: %s); the Lease at most %s old", len(notReady), firstOr(notReady), maxLeaseAge.Round(time.Second))
	b.Logf("agent warnings: %v (first: %.300s); the node's failed requests in the audit log: %v", failed, firstFailure, refused)
	// One line: without -v, go test keeps only a benchmark's first ten
	// lines of log.
	series := make([]string, len(samples))
	for i, s := range samples {
		series[i] = fmt.Sprintf("%s %.1f/%.1f/%d", s.at, mib(s.rss), mib(s.anon), s.goroutines)
	}
	b.Logf("agent memory by minute (time VmRSS/RssAnon MiB/goroutines): %s", strings.Join(series, ", "))
	if len(notReady) > 0 {
		b.Errorf("the node was not Ready at %d of its looks, first %s", len(notReady), notReady[0])
	}
	if firstFailure != "" {
		b.Errorf("failed status writes: %v, first: %.400s", failed, firstFailure)
	}
}

type memSample struct {
	at         time.Duration
	rss, anon  uint64
	goroutines int
}

type churnStats struct {
	created, deleted, running, errors int
	notRunning                        []string
}

// churn creates rate pods a minute and deletes each soakPodLifetime after
// it was created, until ctx ends. Pods carry no nodeName: the scheduler
// places them.
func churn(ctx context.Context, b *testing.B, pods podClient, rate int, st *churnStats) {
	type live struct {
		name string
		at   time.Time
	}
	var queue []live
	tick := time.NewTicker(time.Minute / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		name := fmt.Sprintf("soak-%05d", i)
		_, err := pods.Create(ctx, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "soak"}},
			Spec: v1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](5),
				Containers:                    []v1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "1000"}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.Logf("creating %s: %v", name, err)
			st.errors++
		} else {
			st.created++
			queue = append(queue, live{name, time.Now()})
		}
		for len(queue) > 0 && time.Since(queue[0].at) >= soakPodLifetime {
			p := queue[0]
			queue = queue[1:]
			got, err := pods.Get(ctx, p.name, metav1.GetOptions{})
			switch {
			case err != nil:
				st.notRunning = append(st.notRunning, fmt.Sprintf("%s: %v", p.name, err))
			case podRunningInAPI(got):
				st.running++
			default:
				st.notRunning = append(st.notRunning, fmt.Sprintf("%s: phase %s on %q", p.name, got.Status.Phase, got.Spec.NodeName))
			}
			if err := pods.Delete(ctx, p.name, metav1.DeleteOptions{}); err != nil {
				if ctx.Err() != nil {
					return
				}
				b.Logf("deleting %s: %v", p.name, err)
				st.errors++
			} else {
				st.deleted++
			}
		}
	}
}

// podClient is the part of the pods client the churn uses.
type podClient interface {
	Create(context.Context, *v1.Pod, metav1.CreateOptions) (*v1.Pod, error)
	Get(context.Context, string, metav1.GetOptions) (*v1.Pod, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

// nodeReady returns the node's Ready status and, unless True, why.
func nodeReady(n *v1.Node) (v1.ConditionStatus, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			if c.Status != v1.ConditionTrue {
				return c.Status, fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
			}
			return c.Status, ""
		}
	}
	return v1.ConditionUnknown, "no Ready condition"
}

func leaseAge(l *coordinationv1.Lease) time.Duration {
	if l.Spec.RenewTime == nil {
		return 0
	}
	return time.Since(l.Spec.RenewTime.Time)
}

// procKB returns a "Name: N kB" field of /proc/pid/status in bytes (0 if
// unreadable).
func procKB(pid int, field string) uint64 {
	v, _ := kbField(fmt.Sprintf("/proc/%d/status", pid), field)
	return v
}

// agentGoroutines reads go_goroutines from the agent's /metrics (-1 if
// unreadable).
func agentGoroutines(a *harness.Agent) int {
	var text string
	if err := a.Get("/metrics", &text); err != nil {
		return -1
	}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return int(v)
			}
		}
	}
	return -1
}

func firstOr(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}
