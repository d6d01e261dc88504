// Package clusternode_test keeps a minilet node under the full upstream
// control plane for minutes and checks that its status stays its own and
// fresh. It is a package of its own so that its long run overlaps the
// other cluster-mode tests. Skipped unless MINILET_CLUSTER=1.
package clusternode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// soakTime is how long the node is watched: MINILET_NODE_SOAK (e.g. 3m,
// what the issue that found the bug asks for), else 90 s in CI, which
// covers nine status reports after the controller-manager's edit (the old
// code failed at the first, 42 s in) without holding one of CI's two test
// slots for minutes. A node whose status writes fail stays Ready for a
// while on its Lease alone, so Ready at one moment proves nothing.
func soakTime(t *testing.T) time.Duration {
	if v := os.Getenv("MINILET_NODE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("MINILET_NODE_SOAK=%q: %v", v, err)
		}
		return d
	}
	return 90 * time.Second
}

// With the controller-manager removing the not-ready taint that admission
// put on the new Node, and an admin adding and removing a taint of their
// own, every status report (every 10 s here) must still land: the Ready
// condition's heartbeat advances each period and the agent logs no failed
// write. (The stale-Node bug failed every write from the first report
// after the controller-manager's edit: NodeRestriction refuses a node that
// sends taints back.)
func TestNodeStatusStaysFreshUnderTheControlPlane(t *testing.T) {
	clustertest.SkipUnlessEnabled(t)
	srv := clustertest.Start(t, clustertest.Options{ControlPlane: true})
	a := harness.New(t)
	a.NodeName = fmt.Sprintf("soak-%d", time.Now().UnixNano()%1e6)
	cfg := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+
		"nodeStatusUpdateFrequency: 2s\nnodeStatusReportFrequency: 10s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.ExtraArgs = append(srv.AgentArgs(a.NodeName), "--config", cfg)
	a.Start()
	ctx := context.Background()
	nodes := srv.Admin.CoreV1().Nodes()
	heartbeat := func() (time.Time, *v1.Node, string) {
		n, err := nodes.Get(ctx, a.NodeName, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, nil, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				if c.Status != v1.ConditionTrue {
					return time.Time{}, n, fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
				}
				return c.LastHeartbeatTime.Time, n, ""
			}
		}
		return time.Time{}, n, "no Ready condition"
	}
	// The controller-manager takes the admission's not-ready taint off a
	// Ready node.
	harness.Eventually(t, "the node Ready without the not-ready taint", func() (bool, string) {
		hb, n, why := heartbeat()
		if hb.IsZero() {
			return false, why
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == v1.TaintNodeNotReady {
				return false, "still tainted " + taint.Key
			}
		}
		return true, ""
	})

	// The node's own events, from the kubelet, as the kubelet records them.
	harness.Eventually(t, "the node's events in the API server", func() (bool, string) {
		list, err := srv.Admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Node", "involvedObject.name": a.NodeName}.AsSelector().String(),
		})
		if err != nil {
			return false, err.Error()
		}
		seen := map[string]bool{}
		var all []string
		for _, ev := range list.Items {
			if ev.Source.Component == "kubelet" && ev.Source.Host == a.NodeName {
				seen[ev.Reason] = true
			}
			all = append(all, ev.Source.Component+"/"+ev.Reason)
		}
		for _, r := range []string{"Starting", "NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID", "NodeReady", "NodeAllocatableEnforced"} {
			if !seen[r] {
				return false, fmt.Sprintf("no %s among %v", r, all)
			}
		}
		return true, ""
	})

	adminTaint := v1.Taint{Key: "example.com/maintenance", Effect: v1.TaintEffectNoSchedule}
	// The admin retries on a conflict, as kubectl taint does: the agent's
	// status patches and the controller-manager change the Node meanwhile.
	setTaint := func(on bool) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			n, err := nodes.Get(ctx, a.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var taints []v1.Taint
			for _, tt := range n.Spec.Taints {
				if tt.Key != adminTaint.Key {
					taints = append(taints, tt)
				}
			}
			if on {
				taints = append(taints, adminTaint)
			}
			n.Spec.Taints = taints
			_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("admin taint %v: %v", on, err)
		}
	}

	soak := soakTime(t)
	start := time.Now()
	last, _, _ := heartbeat()
	advances := 0
	for time.Since(start) < soak {
		switch el := time.Since(start); {
		case el > soak/3 && el < soak/3+3*time.Second:
			setTaint(true)
		case el > 2*soak/3 && el < 2*soak/3+3*time.Second:
			setTaint(false)
		}
		time.Sleep(3 * time.Second)
		hb, _, why := heartbeat()
		if hb.IsZero() {
			t.Fatalf("node not Ready after %s: %s", time.Since(start).Round(time.Second), why)
		}
		if hb.After(last) {
			advances++
			last = hb
		}
		if stale := time.Since(hb); stale > 40*time.Second {
			t.Fatalf("Ready heartbeat %s old after %s of %s (status reports every 10 s)", stale.Round(time.Second), time.Since(start).Round(time.Second), soak)
		}
	}
	if want := int(soak/(10*time.Second)) - 3; advances < want {
		t.Errorf("the Ready heartbeat advanced %d times in %s, want at least %d", advances, soak, want)
	}
	if n, err := nodes.Get(ctx, a.NodeName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else {
		for _, tt := range n.Spec.Taints {
			if tt.Key == adminTaint.Key {
				t.Errorf("the admin's taint came back after they removed it: %v", n.Spec.Taints)
			}
		}
	}
	if logs := a.Logs(); strings.Contains(logs, "node status not written") {
		i := strings.Index(logs, "node status not written")
		t.Errorf("failed status writes during the soak, first: %.400s", logs[i:])
	}
}
