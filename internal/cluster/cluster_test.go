package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// These tests need no API server: they check the rules the package
// applies before and between requests.

func TestNewRejectsBadConfig(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no kubeconfig", Config{NodeName: "n"}},
		{"no node name", Config{Kubeconfig: kc}},
		{"negative update frequency", Config{Kubeconfig: kc, NodeName: "n", NodeStatusUpdateFrequency: -1}},
		{"negative lease", Config{Kubeconfig: kc, NodeName: "n", LeaseDurationSeconds: -1}},
		{"missing kubeconfig file", Config{Kubeconfig: kc + ".missing", NodeName: "n"}},
	} {
		tc.cfg.Logger = log
		if _, err := New(tc.cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	c, err := New(Config{Kubeconfig: kc, NodeName: "n", Logger: log})
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := c.Start(context.Background(), nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Start without a node source: got %v, want ErrInvalidArgument", err)
	}
	c.Stop() // never started: must not block
}

func TestStatusEqualIgnoresHeartbeatsAndForeignConditions(t *testing.T) {
	ready := func(s v1.ConditionStatus, beat int64) v1.NodeCondition {
		return v1.NodeCondition{Type: v1.NodeReady, Status: s, LastHeartbeatTime: metav1.Unix(beat, 0)}
	}
	foreign := v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionFalse}
	cur := v1.NodeStatus{Conditions: []v1.NodeCondition{ready(v1.ConditionTrue, 1), foreign}}
	if !statusEqual(cur, v1.NodeStatus{Conditions: []v1.NodeCondition{ready(v1.ConditionTrue, 99)}}, nil) {
		t.Error("a new heartbeat alone counted as a change")
	}
	if statusEqual(cur, v1.NodeStatus{Conditions: []v1.NodeCondition{ready(v1.ConditionFalse, 1)}}, nil) {
		t.Error("Ready turning False did not count as a change")
	}
	merged := mergeNodeStatus(cur, v1.NodeStatus{Conditions: []v1.NodeCondition{ready(v1.ConditionFalse, 2)}}, nil)
	if len(merged.Conditions) != 2 || merged.Conditions[1].Type != "KernelDeadlock" {
		t.Errorf("another writer's condition was dropped: %+v", merged.Conditions)
	}
}

func TestNewerOrSame(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{{"10", "9", true}, {"9", "10", false}, {"10", "10", true}, {"11", "12", false}} {
		if got := newerOrSame(tc.a, tc.b); got != tc.want {
			t.Errorf("newerOrSame(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestMergePodStatusKeepsWhatOthersOwn(t *testing.T) {
	old := v1.PodStatus{
		QOSClass:          v1.PodQOSBestEffort,
		NominatedNodeName: "n",
		Conditions: []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue},
			{Type: v1.PodReady, Status: v1.ConditionFalse},
			{Type: "example.com/gate", Status: v1.ConditionTrue},
		},
	}
	got := mergePodStatus(old, v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}})
	if got.QOSClass != v1.PodQOSBestEffort || got.NominatedNodeName != "n" {
		t.Errorf("API server's fields dropped: %+v", got)
	}
	types := map[v1.PodConditionType]v1.ConditionStatus{}
	for _, c := range got.Conditions {
		types[c.Type] = c.Status
	}
	if len(got.Conditions) != 3 || types[v1.PodReady] != v1.ConditionTrue || types[v1.PodScheduled] != v1.ConditionTrue || types["example.com/gate"] != v1.ConditionTrue {
		t.Errorf("conditions: %+v", got.Conditions)
	}
}

// Others' extended resources on the Node (patched into its status) stay,
// with allocatable as capacity, as the kubelet keeps them; one this agent
// reported and no longer does (a device plugin gone) goes.
func TestMergeKeepsOthersExtendedResources(t *testing.T) {
	q := resource.MustParse
	cur := v1.NodeStatus{
		Capacity:    v1.ResourceList{"cpu": q("2"), "example.com/dongle": q("4"), "example.com/gone": q("2"), "example.com/dev": q("3")},
		Allocatable: v1.ResourceList{"cpu": q("2"), "example.com/dongle": q("4"), "example.com/gone": q("0"), "example.com/dev": q("3")},
	}
	want := v1.NodeStatus{
		Capacity:    v1.ResourceList{"cpu": q("2"), "example.com/dev": q("3")},
		Allocatable: v1.ResourceList{"cpu": q("1900m"), "example.com/dev": q("2")},
	}
	ours := map[v1.ResourceName]bool{"cpu": true, "example.com/dev": true, "example.com/gone": true}
	got := mergeNodeStatus(cur, want, ours)
	wantCap := v1.ResourceList{"cpu": q("2"), "example.com/dev": q("3"), "example.com/dongle": q("4")}
	wantAlloc := v1.ResourceList{"cpu": q("1900m"), "example.com/dev": q("2"), "example.com/dongle": q("4")}
	if !apiequality.Semantic.DeepEqual(got.Capacity, wantCap) || !apiequality.Semantic.DeepEqual(got.Allocatable, wantAlloc) {
		t.Fatalf("merged capacity %v allocatable %v; want %v and %v", got.Capacity, got.Allocatable, wantCap, wantAlloc)
	}
	if !statusEqual(got, want, ours) {
		t.Error("a status with others' resources kept counted as a change")
	}
}
