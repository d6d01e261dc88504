package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/minilet/minilet/internal/cluster"
	"github.com/minilet/minilet/internal/cluster/clusterbin"
	"github.com/minilet/minilet/internal/cluster/clustertest"
)

// Issue 15's outage requirement: with the API server stopped for a minute
// under the full control plane, pods keep running and their probes keep
// acting; when it is back the node is Ready with a fresh heartbeat within
// 15 s, status and events recorded meanwhile reach the API server, no pod
// was restarted because of the outage, and the controller-manager neither
// marks the node NotReady nor evicts its pods.
func TestAPIServerDownForAMinute(t *testing.T) {
	const (
		outage    = 60 * time.Second
		readyIn   = 15 * time.Second // the requirement
		afterWait = 120 * time.Second
	)
	e := setupWith(t, clustertest.Options{ControlPlane: true})
	srv, nodes := e.srv, e.srv.Admin.CoreV1().Nodes()
	// The controller-manager takes the not-ready taint admission puts on a
	// new Node off once it is Ready; from then on any taint is news.
	e.eventually("the node without taints", func() (bool, string) {
		n, err := nodes.Get(e.ctx, e.a.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(n.Spec.Taints) == 0, fmt.Sprint(n.Spec.Taints)
	})

	// sick turns unhealthy when the test creates its flag, during the
	// outage; the restarted container removes the flag and is healthy
	// again, so the outage's one liveness failure is one restart.
	flag := filepath.Join(t.TempDir(), "sick")
	e.create(e.pod("steady", "sleep", "1000"))
	sick := e.pod("sick", "sh", "-c", "rm -f "+flag+"; exec sleep 1000")
	sick.Spec.Containers[0].LivenessProbe = &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "! test -e " + flag}}},
		PeriodSeconds:    1,
		FailureThreshold: 1,
	}
	e.create(sick)
	started := func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[0].ContainerID != ""
	}
	steadyBefore := e.waitPod("steady Running", "steady", started)
	sickBefore := e.waitPod("sick Running", "sick", started)
	if n := sickBefore.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Fatalf("sick restarted %d times before the outage", n)
	}

	srv.StopAPIServer()
	down := time.Now()
	t.Logf("API server stopped")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The prober and the sync loop go on without the API server.
	e.a.Eventually("sick restarted by its liveness probe during the outage", func() (bool, string) {
		p, ok := e.a.Pod("sick")
		if !ok || len(p.Status.ContainerStatuses) != 1 {
			return false, "not listed"
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Running != nil, fmt.Sprintf("restarts %d state %+v", cs.RestartCount, cs.State)
	})
	restartedAt := time.Now()
	var reasons []string
	for _, ev := range e.a.Events("default/sick") {
		reasons = append(reasons, ev.Reason)
	}
	if s := strings.Join(reasons, ","); !strings.Contains(s, "Unhealthy") || !strings.Contains(s, "Killing") {
		t.Errorf("the agent recorded no Unhealthy and Killing events for sick: %s", s)
	}
	// steady runs, untouched, for the whole outage.
	steadyID := steadyBefore.Status.ContainerStatuses[0].ContainerID
	for time.Since(down) < outage {
		p, ok := e.a.Pod("steady")
		if !ok || p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 ||
			p.Status.ContainerStatuses[0].ContainerID != steadyID || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("steady disturbed %s into the outage: %+v", time.Since(down).Round(time.Second), p.Status)
		}
		time.Sleep(time.Second)
	}
	// Both components lose their leader-election leases (renew deadline
	// 10 s) and exit, as they do in a real cluster, where the kubelet
	// restarts them; they are restarted below once the node is back.
	comps := []string{clusterbin.ControllerManager, clusterbin.Scheduler}
	for _, c := range comps {
		t.Logf("%s running at the end of the outage: %v", c, srv.ComponentRunning(c))
	}

	restart := time.Now()
	srv.StartAPIServer()
	up := time.Now()
	t.Logf("API server ready again after %s down (%s to start)", up.Sub(down).Round(100*time.Millisecond), up.Sub(restart).Round(100*time.Millisecond))

	// The node: Ready with a heartbeat written after the outage, and its
	// Lease renewed. The API server answers some requests before it calls
	// itself ready, so these may come before up; heartbeats have a
	// resolution of a second.
	since := metav1.NewTime(restart.Truncate(time.Second))
	var readyAfter, leaseAfter time.Duration
	within(t, afterWait, "the node Ready with a heartbeat from after the outage, and its Lease renewed", func() (bool, string) {
		var why []string
		if readyAfter == 0 {
			n, err := nodes.Get(e.ctx, e.a.NodeName, metav1.GetOptions{})
			switch c := readyCondition(n); {
			case err != nil:
				why = append(why, err.Error())
			case c == nil:
				why = append(why, "no Ready condition")
			case c.Status != v1.ConditionTrue || c.LastHeartbeatTime.Before(&since):
				why = append(why, fmt.Sprintf("Ready=%s heartbeat %s", c.Status, c.LastHeartbeatTime.UTC()))
			default:
				readyAfter = time.Since(up)
				t.Logf("Ready heartbeat %s, API server started %s, ready %s", c.LastHeartbeatTime.UTC().Format(time.TimeOnly),
					restart.UTC().Format("15:04:05.0"), up.UTC().Format("15:04:05.0"))
			}
		}
		if leaseAfter == 0 {
			l, err := srv.Admin.CoordinationV1().Leases(cluster.LeaseNamespace).Get(e.ctx, e.a.NodeName, metav1.GetOptions{})
			switch {
			case err != nil:
				why = append(why, err.Error())
			case l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(restart):
				why = append(why, fmt.Sprintf("lease renewed %v", l.Spec.RenewTime))
			default:
				leaseAfter = time.Since(up)
			}
		}
		return readyAfter != 0 && leaseAfter != 0, strings.Join(why, "; ")
	})
	t.Logf("after the API server was ready: Lease renewed within %s, node Ready with a fresh heartbeat within %s (requirement %s)",
		leaseAfter.Round(10*time.Millisecond), readyAfter.Round(10*time.Millisecond), readyIn)
	if readyAfter > readyIn {
		t.Errorf("node Ready with a fresh heartbeat %s after the API server was back, want within %s", readyAfter.Round(100*time.Millisecond), readyIn)
	}

	// Pod status catches up: sick's restart is in the API server, steady
	// is the same container as before the outage.
	start := time.Now()
	within(t, afterWait, "sick's restart in the API server", func() (bool, string) {
		p, err := e.get("sick")
		if err != nil {
			return false, err.Error()
		}
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1 && started(p),
			fmt.Sprintf("phase %s containers %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	t.Logf("sick's restart count in the API server %s after the node was checked", time.Since(start).Round(100*time.Millisecond))
	// The events recorded during the outage arrive, with their times.
	start = time.Now()
	sel := fields.OneTermEqualSelector("involvedObject.uid", string(sickBefore.UID)).String()
	within(t, afterWait, "sick's Unhealthy and Killing events from the outage in the API server", func() (bool, string) {
		list, err := srv.Admin.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		found := map[string]bool{}
		var seen []string
		for _, ev := range list.Items {
			first := ev.FirstTimestamp.Time
			seen = append(seen, fmt.Sprintf("%s at %s", ev.Reason, first.Format(time.TimeOnly)))
			if !first.Before(down.Truncate(time.Second)) && !first.After(restartedAt) {
				found[ev.Reason] = true
			}
		}
		return found["Unhealthy"] && found["Killing"], strings.Join(seen, ", ") +
			fmt.Sprintf(" (outage from %s)", down.Format(time.TimeOnly))
	})
	t.Logf("the outage's events in the API server %s after the pod status", time.Since(start).Round(100*time.Millisecond))

	// The controller-manager and scheduler come back (restarted if they
	// exited) and lead again: new holders of their leader leases.
	for _, c := range comps {
		srv.StartComponent(c)
		within(t, afterWait, c+" leading again", func() (bool, string) {
			l, err := srv.Admin.CoordinationV1().Leases("kube-system").Get(e.ctx, c, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(up), fmt.Sprintf("holder %v renewed %v", ptrString(l.Spec.HolderIdentity), l.Spec.RenewTime)
		})
	}
	// Give the node lifecycle controller, which checks every node every
	// 5 s, several passes: the node must stay Ready and untainted and its
	// pods must stay, with no restart of steady.
	watch := time.Now()
	for time.Since(watch) < 20*time.Second {
		n, err := nodes.Get(e.ctx, e.a.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := readyCondition(n); c == nil || c.Status != v1.ConditionTrue || len(n.Spec.Taints) != 0 {
			t.Fatalf("node after the outage: Ready %+v, taints %v", c, n.Spec.Taints)
		}
		for _, before := range []*v1.Pod{steadyBefore, sickBefore} {
			p, err := e.get(before.Name)
			if err != nil {
				t.Fatalf("%s after the outage: %v", before.Name, err)
			}
			if p.UID != before.UID || p.DeletionTimestamp != nil {
				t.Fatalf("%s after the outage: uid %s (was %s), deletion %v", before.Name, p.UID, before.UID, p.DeletionTimestamp)
			}
		}
		time.Sleep(time.Second)
	}
	steady, err := e.get("steady")
	if err != nil {
		t.Fatal(err)
	}
	if b, a := steadyBefore.Status.ContainerStatuses[0], steady.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount || a.State.Running == nil {
		t.Errorf("steady was restarted by the outage: %+v → %+v", b, a)
	}
}

// within polls cond every 100 ms until it holds, failing t after d.
func within(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", d, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readyCondition(n *v1.Node) *v1.NodeCondition {
	if n == nil {
		return nil
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func ptrString(p *string) string {
	if p == nil {
		return "<none>"
	}
	return *p
}
