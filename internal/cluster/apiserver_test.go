package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podspec"
)

// These tests run against a real kube-apiserver and etcd (skipped unless
// MINILET_CLUSTER=1), as a node under the Node authorizer and
// NodeRestriction.

const wait = 30 * time.Second

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	last := ""
	for time.Now().Before(deadline) {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %s", what, last)
}

// fakeNode is the agent's node as NodeSource sees it; tests change it.
type fakeNode struct {
	mu    sync.Mutex
	name  string
	ready v1.ConditionStatus
	devs  int64
}

func (f *fakeNode) build() *v1.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("2"),
		v1.ResourceMemory: resource.MustParse("4Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
		"example.com/dev": *resource.NewQuantity(f.devs, resource.DecimalSI),
	}
	now := metav1.Now()
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: f.name, Labels: map[string]string{
			"kubernetes.io/hostname": f.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		}},
		Status: v1.NodeStatus{
			Capacity: res, Allocatable: res,
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: f.ready, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
			Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}},
			NodeInfo:   v1.NodeSystemInfo{KubeletVersion: "v1.34.0-minilet", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

func nodeName(t *testing.T) string {
	return fmt.Sprintf("n%d-%d", os.Getpid()%100000, time.Now().UnixNano()%100000)
}

// start runs a Cluster for node name with fast timers.
func start(t *testing.T, srv *clustertest.Server, fn *fakeNode) *Cluster {
	t.Helper()
	c, err := New(Config{
		Kubeconfig: srv.NodeKubeconfig(fn.name), NodeName: fn.name,
		NodeStatusUpdateFrequency: 200 * time.Millisecond, LeaseDurationSeconds: 2,
		Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Start(ctx, fn.build); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); c.Stop() })
	return c
}

func testPod(ns, name, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{
			NodeName:   node,
			Containers: []v1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "1000"}}},
		},
	}
}

func TestNodeRegistersWithStatusAndLease(t *testing.T) {
	fn := &fakeNode{name: nodeName(t), ready: v1.ConditionTrue, devs: 2}
	srv := clustertest.Start(t, clustertest.Options{TokenNodes: []string{fn.name}})
	c := start(t, srv, fn)
	ctx := context.Background()

	eventually(t, "node registered with its device resource and Ready", func() (bool, string) {
		n, err := srv.Admin.CoreV1().Nodes().Get(ctx, fn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := n.Status.Allocatable["example.com/dev"]
		return n.Labels["kubernetes.io/hostname"] == fn.name && q.Value() == 2 &&
			len(n.Status.Conditions) == 1 && n.Status.Conditions[0].Status == v1.ConditionTrue, fmt.Sprintf("%+v", n.Status)
	})
	var firstRenew time.Time
	eventually(t, "lease created", func() (bool, string) {
		l, err := srv.Admin.CoordinationV1().Leases(LeaseNamespace).Get(ctx, fn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != fn.name || l.Spec.RenewTime == nil {
			return false, fmt.Sprintf("%+v", l.Spec)
		}
		firstRenew = l.Spec.RenewTime.Time
		return *l.Spec.LeaseDurationSeconds == 2 && len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == c.NodeUID(), fmt.Sprintf("%+v %+v", l.Spec, l.OwnerReferences)
	})
	eventually(t, "lease renewed", func() (bool, string) {
		l, err := srv.Admin.CoordinationV1().Leases(LeaseNamespace).Get(ctx, fn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(firstRenew), l.Spec.RenewTime.String()
	})

	fn.mu.Lock()
	fn.ready, fn.devs = v1.ConditionFalse, 5
	fn.mu.Unlock()
	eventually(t, "status change written", func() (bool, string) {
		n, err := srv.Admin.CoreV1().Nodes().Get(ctx, fn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := n.Status.Capacity["example.com/dev"]
		return q.Value() == 5 && n.Status.Conditions[0].Status == v1.ConditionFalse, fmt.Sprintf("%+v", n.Status)
	})
}

func TestNodeCannotTouchOtherNodesObjects(t *testing.T) {
	fn := &fakeNode{name: nodeName(t), ready: v1.ConditionTrue}
	srv := clustertest.Start(t, clustertest.Options{})
	c := start(t, srv, fn)
	<-c.Registered()
	_, err := c.Client().CoreV1().Nodes().Get(context.Background(), "someone-else", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("reading another node: got %v, want Forbidden (is the Node authorizer on?)", err)
	}
	_, err = c.Client().CoreV1().Pods("default").Create(context.Background(), testPod("default", "not-a-mirror", fn.name), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("creating a non-mirror pod: got %v, want Forbidden (is NodeRestriction on?)", err)
	}
}

func TestPodsFlowInStatusFlowsOutAndDeletionIsGraceful(t *testing.T) {
	fn := &fakeNode{name: nodeName(t), ready: v1.ConditionTrue}
	srv := clustertest.Start(t, clustertest.Options{})
	c := start(t, srv, fn)
	ctx := context.Background()
	<-c.Registered()

	other := testPod("default", "elsewhere", "another-node")
	if _, err := srv.Admin.CoreV1().Pods("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := srv.Admin.CoreV1().Pods("default").Create(ctx, testPod("default", "web", fn.name), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := waitSnapshot(t, c, func(ps []*v1.Pod) bool { return len(ps) == 1 && ps[0].UID == created.UID })
	if got[0].Annotations[podspec.AnnotationConfigSource] != SourceAPI {
		t.Errorf("API pod not annotated with its source: %v", got[0].Annotations)
	}

	now := metav1.Now()
	running := v1.PodStatus{
		Phase: v1.PodRunning, HostIP: "127.0.0.1", StartTime: &now,
		Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []v1.ContainerStatus{{
			Name: "c", Ready: true, Image: "host", ImageID: "host", ContainerID: "minilet://abc",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	c.SetPodStatus(got[0], running)
	eventually(t, "Running and Ready in the API server", func() (bool, string) {
		p, err := srv.Admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == v1.PodRunning && len(p.Status.Conditions) == 1 && p.Status.Conditions[0].Status == v1.ConditionTrue &&
			len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil, fmt.Sprintf("%+v", p.Status)
	})
	waitIdle(t, c)
	before := c.status.patches.Load()
	c.SetPodStatus(got[0], running) // the same again: no request
	waitIdle(t, c)
	if n := c.status.patches.Load() - before; n != 0 {
		t.Errorf("an unchanged status cost %d patches", n)
	}

	// Graceful deletion reaches the agent with its grace period; the pod
	// stays until FinalizeDeletion.
	if err := srv.Admin.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](17)}); err != nil {
		t.Fatal(err)
	}
	got = waitSnapshot(t, c, func(ps []*v1.Pod) bool { return len(ps) == 1 && ps[0].DeletionTimestamp != nil })
	if g := got[0].DeletionGracePeriodSeconds; g == nil || *g != 17 {
		t.Errorf("grace period = %v, want 17", g)
	}
	if _, err := srv.Admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod gone before FinalizeDeletion: %v", err)
	}
	if err := c.FinalizeDeletion(ctx, got[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.FinalizeDeletion(ctx, got[0]); err != nil {
		t.Fatalf("finalizing twice: %v", err)
	}
	_, err = srv.Admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("after FinalizeDeletion: %v, want NotFound", err)
	}
	waitSnapshot(t, c, func(ps []*v1.Pod) bool { return len(ps) == 0 })
}

func TestMirrorPodCarriesStaticPodStatus(t *testing.T) {
	fn := &fakeNode{name: nodeName(t), ready: v1.ConditionTrue}
	srv := clustertest.Start(t, clustertest.Options{})
	c := start(t, srv, fn)
	ctx := context.Background()
	<-c.Registered()
	waitSnapshot(t, c, func(ps []*v1.Pod) bool { return len(ps) == 0 })

	static := testPod("default", "etcd-"+fn.name, fn.name)
	static.UID = types.UID("hash-1")
	static.Annotations = map[string]string{podspec.AnnotationConfigSource: podspec.SourceFile, podspec.AnnotationConfigHash: "hash-1"}
	if err := c.SyncMirrorPod(ctx, static); err != nil {
		t.Fatal(err)
	}
	var first types.UID
	eventually(t, "mirror pod created", func() (bool, string) {
		p, err := srv.Admin.CoreV1().Pods("default").Get(ctx, static.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		first = p.UID
		return p.Annotations[podspec.AnnotationConfigMirror] == "hash-1", fmt.Sprint(p.Annotations)
	})
	c.SetPodStatus(static, v1.PodStatus{Phase: v1.PodRunning, Message: "from the static pod"})
	eventually(t, "static pod status on the mirror", func() (bool, string) {
		p, err := srv.Admin.CoreV1().Pods("default").Get(ctx, static.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Message == "from the static pod", fmt.Sprintf("%+v", p.Status)
	})
	// Mirror pods never come back to the agent as pods to run.
	if ps := lastSnapshot(c); len(ps) != 0 {
		t.Errorf("mirror pod in the API snapshot: %v", ps)
	}

	static.Annotations[podspec.AnnotationConfigHash] = "hash-2"
	eventually(t, "mirror pod recreated for the new hash", func() (bool, string) {
		if err := c.SyncMirrorPod(ctx, static); err != nil {
			return false, err.Error()
		}
		p, err := srv.Admin.CoreV1().Pods("default").Get(ctx, static.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != first && p.Annotations[podspec.AnnotationConfigMirror] == "hash-2", fmt.Sprint(p.Annotations)
	})
	// The sync loop sees the mirrors in the API snapshot, apart from the
	// pods to run.
	timeout := time.After(wait)
	for seen := false; !seen; {
		select {
		case u := <-c.Updates():
			snapshots.Store(c, u.Pods)
			seen = len(u.Mirrors) == 1 && u.Mirrors[0].Annotations[podspec.AnnotationConfigMirror] == "hash-2"
		case <-timeout:
			t.Fatal("no snapshot showing the hash-2 mirror")
		}
	}
	// The old version going away leaves the new version's mirror, and
	// its status never lands there.
	old := static.DeepCopy()
	old.Annotations[podspec.AnnotationConfigHash] = "hash-1"
	current := static.DeepCopy()
	current.UID = "hash-2"
	c.SetPodStatus(old, v1.PodStatus{Phase: v1.PodRunning, Message: "from the old version"})
	c.SetPodStatus(current, v1.PodStatus{Phase: v1.PodRunning, Message: "from the new version"})
	eventually(t, "the new version's status on its mirror", func() (bool, string) {
		p, err := srv.Admin.CoreV1().Pods("default").Get(ctx, static.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Message == "from the new version", p.Status.Message
	})
	if err := c.DeleteMirrorPod(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, c)
	p, err := srv.Admin.CoreV1().Pods("default").Get(ctx, static.Name, metav1.GetOptions{})
	if err != nil || p.Annotations[podspec.AnnotationConfigMirror] != "hash-2" || p.Status.Message != "from the new version" {
		t.Fatalf("after the old version went: %v, %v", err, p)
	}
	// Cleanup works from the watch cache, which may not show the new
	// mirror yet: the agent calls it periodically, so does the test.
	eventually(t, "orphaned mirror pod deleted", func() (bool, string) {
		if err := c.CleanupMirrorPods(ctx, nil); err != nil {
			return false, err.Error()
		}
		_, err := srv.Admin.CoreV1().Pods("default").Get(ctx, static.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func TestEventSinkCreatesThenPatchesCount(t *testing.T) {
	fn := &fakeNode{name: nodeName(t), ready: v1.ConditionTrue}
	srv := clustertest.Start(t, clustertest.Options{})
	c := start(t, srv, fn)
	ctx := context.Background()
	<-c.Registered()
	now := metav1.Now()
	ev := &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fn.name + ".1", Namespace: ""},
		InvolvedObject: v1.ObjectReference{Kind: "Node", Name: fn.name, UID: types.UID(fn.name)},
		Reason:         "Starting", Message: "starting", Type: v1.EventTypeNormal, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: v1.EventSource{Component: "kubelet", Host: fn.name},
	}
	sink := c.EventSink()
	if _, err := sink.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	ev.Count, ev.Message = 3, "starting again"
	if _, err := sink.Update(ctx, ev); err != nil {
		t.Fatal(err)
	}
	got, err := srv.Admin.CoreV1().Events("default").Get(ctx, ev.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 3 || got.Message != "starting again" {
		t.Errorf("event after update: count %d message %q", got.Count, got.Message)
	}
	missing := ev.DeepCopy()
	missing.Name = fn.name + ".missing"
	if _, err := sink.Update(ctx, missing); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("updating a missing event: %v, want ErrNotFound (so the retry writer creates it)", err)
	}
}

func TestStatusCatchesUpAfterAPIServerOutage(t *testing.T) {
	fn := &fakeNode{name: nodeName(t), ready: v1.ConditionTrue}
	srv := clustertest.Start(t, clustertest.Options{})
	c := start(t, srv, fn)
	ctx := context.Background()
	<-c.Registered()
	created, err := srv.Admin.CoreV1().Pods("default").Create(ctx, testPod("default", "survivor", fn.name), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := waitSnapshot(t, c, func(ps []*v1.Pod) bool { return len(ps) == 1 && ps[0].UID == created.UID })

	srv.StopAPIServer()
	c.SetPodStatus(got[0], v1.PodStatus{Phase: v1.PodRunning, Message: "written during the outage"})
	fn.mu.Lock()
	fn.devs = 7
	fn.mu.Unlock()
	srv.StartAPIServer()

	eventually(t, "pod status written after the outage", func() (bool, string) {
		p, err := srv.Admin.CoreV1().Pods("default").Get(ctx, "survivor", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Message == "written during the outage", fmt.Sprintf("%+v", p.Status)
	})
	eventually(t, "node status written after the outage", func() (bool, string) {
		n, err := srv.Admin.CoreV1().Nodes().Get(ctx, fn.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := n.Status.Capacity["example.com/dev"]
		return q.Value() == 7, q.String()
	})
}

// snapshots remembers the last snapshot read per cluster, for lastSnapshot.
var snapshots sync.Map

// waitSnapshot reads snapshots until one satisfies ok.
func waitSnapshot(t *testing.T, c *Cluster, ok func([]*v1.Pod) bool) []*v1.Pod {
	t.Helper()
	if v, found := snapshots.Load(c); found && ok(v.([]*v1.Pod)) {
		return v.([]*v1.Pod)
	}
	timeout := time.After(wait)
	for {
		select {
		case u := <-c.Updates():
			if u.Source != SourceAPI {
				t.Fatalf("snapshot source %q", u.Source)
			}
			snapshots.Store(c, u.Pods)
			if ok(u.Pods) {
				return u.Pods
			}
		case <-timeout:
			v, _ := snapshots.Load(c)
			t.Fatalf("no matching pod snapshot within %s; last: %v", wait, v)
		}
	}
}

// lastSnapshot drains pending snapshots and returns the newest.
func lastSnapshot(c *Cluster) []*v1.Pod {
	for {
		select {
		case u := <-c.Updates():
			snapshots.Store(c, u.Pods)
		default:
			v, _ := snapshots.Load(c)
			ps, _ := v.([]*v1.Pod)
			return ps
		}
	}
}

// waitIdle waits until the status manager has nothing pending.
func waitIdle(t *testing.T, c *Cluster) {
	t.Helper()
	eventually(t, "status writes done", func() (bool, string) {
		c.status.mu.Lock()
		defer c.status.mu.Unlock()
		return len(c.status.pending) == 0, fmt.Sprint(len(c.status.pending), " pending")
	})
}
