// Package cluster_test runs the real minilet binary as a node of a real
// kube-apiserver (with etcd, on loopback) and drives it as a user would,
// with client-go. Skipped unless MINILET_CLUSTER=1.
package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// env is one API server with one minilet joined to it.
type env struct {
	t   *testing.T
	srv *clustertest.Server
	a   *harness.Agent
	ctx context.Context
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, clustertest.Options{})
}

// setupWith is setup with the API server's options (e.g. the full control
// plane) and extra agent flags.
func setupWith(t *testing.T, opts clustertest.Options, agentArgs ...string) *env {
	t.Helper()
	clustertest.SkipUnlessEnabled(t)
	srv := clustertest.Start(t, opts)
	a := harness.New(t)
	a.NodeName = fmt.Sprintf("node-%d", time.Now().UnixNano()%1e6)
	a.ExtraArgs = append(srv.AgentArgs(a.NodeName), agentArgs...)
	a.Start()
	e := &env{t: t, srv: srv, a: a, ctx: context.Background()}
	e.eventually("the node registered and Ready", func() (bool, string) {
		n, err := srv.Admin.CoreV1().Nodes().Get(e.ctx, a.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, c.Message
			}
		}
		return false, "no Ready condition"
	})
	return e
}

func (e *env) eventually(what string, cond func() (bool, string)) {
	e.t.Helper()
	harness.Eventually(e.t, what, cond)
}

// pod is a pod bound to the node running cmd on the host image.
func (e *env) pod(name string, cmd ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName:                      e.a.NodeName,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []v1.Container{{Name: "main", Image: "host", Command: cmd}},
		},
	}
}

func (e *env) create(p *v1.Pod) *v1.Pod {
	e.t.Helper()
	got, err := e.srv.Admin.CoreV1().Pods(p.Namespace).Create(e.ctx, p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	return got
}

func (e *env) get(name string) (*v1.Pod, error) {
	return e.srv.Admin.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
}

// waitPod waits until the API server's copy of pod name satisfies ok.
func (e *env) waitPod(what, name string, ok func(*v1.Pod) bool) *v1.Pod {
	e.t.Helper()
	var last *v1.Pod
	e.eventually(what, func() (bool, string) {
		p, err := e.get(name)
		if err != nil {
			return false, err.Error()
		}
		last = p
		return ok(p), fmt.Sprintf("phase %s conditions %+v containers %+v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	return last
}

func runningReady(p *v1.Pod) bool {
	if p.Status.Phase != v1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		}
	}
	return false
}

func TestPodFromAPIServerRunsAndIsReady(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := e.pod("web", "sleep", "1000")
	p.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: 1,
	}
	e.create(p)
	got := e.waitPod("web Running and Ready in the API server", "web", runningReady)
	if got.Status.HostIP == "" || got.Status.StartTime == nil || got.Status.ContainerStatuses[0].ContainerID == "" {
		t.Errorf("status lacks what the kubelet writes: %+v", got.Status)
	}
	if local, ok := e.a.Pod("web"); !ok || local.Status.Phase != v1.PodRunning {
		t.Errorf("agent's own view of web: %+v (found %v)", local.Status, ok)
	}
}

func TestLivenessFailuresRestartAndShowAsEventsWithCounts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := e.pod("flaky", "sleep", "1000")
	p.Spec.Containers[0].LivenessProbe = &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"false"}}},
		PeriodSeconds:    1,
		FailureThreshold: 1,
	}
	e.create(p)
	e.waitPod("restarts in the API status", "flaky", func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 2
	})
	sel := fields.OneTermEqualSelector("involvedObject.name", "flaky").String()
	e.eventually("Unhealthy events with a count above 1 in the API server", func() (bool, string) {
		list, err := e.srv.Admin.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		seen := ""
		for _, ev := range list.Items {
			seen += fmt.Sprintf("%s x%d; ", ev.Reason, ev.Count)
			// Source component "kubelet", as tools that filter on it expect.
			if ev.Reason == "Unhealthy" && ev.Count >= 2 && ev.Source.Host == e.a.NodeName && ev.Source.Component == "kubelet" {
				return true, seen
			}
		}
		return false, seen
	})
}

func TestDeletingAPodTerminatesItGracefully(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// The container exits on SIGTERM by itself, well within its grace.
	e.create(e.pod("leaving", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"))
	running := e.waitPod("leaving Running", "leaving", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if err := e.srv.Admin.CoreV1().Pods("default").Delete(e.ctx, "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("the pod removed from the API server once its containers stopped", func() (bool, string) {
		p, err := e.get("leaving")
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("uid %s deletion %v status %+v", p.UID, p.DeletionTimestamp, p.Status.ContainerStatuses)
	})
	sel := fields.OneTermEqualSelector("involvedObject.uid", string(running.UID)).String()
	e.eventually("a Killing event", func() (bool, string) {
		list, err := e.srv.Admin.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range list.Items {
			if ev.Reason == "Killing" {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(list.Items), " events")
	})
	e.eventually("the agent forgot the pod", func() (bool, string) {
		_, ok := e.a.Pod("leaving")
		return !ok, "still listed"
	})
}

func TestNodeCapacityShowsDevicePluginResource(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.a.StartPlugin("example.com/gpu", "g0", "g1", "g2")
	e.eventually("example.com/gpu: 3 in the Node's capacity and allocatable", func() (bool, string) {
		n, err := e.srv.Admin.CoreV1().Nodes().Get(e.ctx, e.a.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c, a := n.Status.Capacity["example.com/gpu"], n.Status.Allocatable["example.com/gpu"]
		return c.Value() == 3 && a.Value() == 3, fmt.Sprintf("capacity %s allocatable %s", c.String(), a.String())
	})
}

func TestStaticPodGetsAMirrorPod(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.a.WriteManifest("static.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static\n  namespace: default\nspec:\n  containers:\n  - name: main\n    image: host\n    command: [sleep, '1000']\n")
	name := e.a.Static("static")
	e.waitPod("the mirror pod Running", name, func(p *v1.Pod) bool {
		return p.Annotations["kubernetes.io/config.mirror"] != "" && p.Status.Phase == v1.PodRunning
	})
	e.a.RemoveManifest("static.yaml")
	e.eventually("the mirror pod deleted with its manifest", func() (bool, string) {
		_, err := e.get(name)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func TestPodsKeepRunningWhileAPIServerIsDownAndStatusCatchesUp(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// once runs until the test creates its go file, during the outage.
	goFile := filepath.Join(t.TempDir(), "go")
	e.create(e.pod("steady", "sleep", "1000"))
	e.create(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName: e.a.NodeName, RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{Name: "main", Image: "host", Command: []string{"sh", "-c", "while [ ! -e " + goFile + " ]; do sleep 0.1; done"}}},
		},
	})
	e.waitPod("steady Running", "steady", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 })
	e.waitPod("once Running", "once", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	before, _ := e.get("steady")

	e.srv.StopAPIServer()
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.a.Eventually("once Succeeded on the agent while the API server is down", func() (bool, string) {
		p, ok := e.a.Pod("once")
		return ok && p.Status.Phase == v1.PodSucceeded, string(p.Status.Phase)
	})
	if p, ok := e.a.Pod("steady"); !ok || p.Status.Phase != v1.PodRunning {
		t.Fatalf("steady stopped running during the outage: %+v", p.Status)
	}
	e.srv.StartAPIServer()

	e.waitPod("once Succeeded in the API server after the outage", "once", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	after := e.waitPod("steady still Running", "steady", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount {
		t.Errorf("steady was restarted by the outage: %+v → %+v", b, a)
	}
}

func TestAgentRestartKeepsAPIPodsRunning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.create(e.pod("keeper", "sleep", "1000"))
	before := e.waitPod("keeper Running", "keeper", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != ""
	})
	e.a.Stop()
	e.a.Start()
	e.a.Eventually("keeper adopted by the restarted agent", func() (bool, string) {
		p, ok := e.a.Pod("keeper")
		return ok && p.Status.Phase == v1.PodRunning, string(p.Status.Phase)
	})
	after, err := e.get("keeper")
	if err != nil {
		t.Fatal(err)
	}
	if b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != 0 {
		t.Errorf("keeper's container was replaced across the agent restart: %+v → %+v", b, a)
	}
	e.create(e.pod("newcomer", "sleep", "1000"))
	e.waitPod("a pod created after the restart runs", "newcomer", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
}

// A pod that does not fit is rejected as the kubelet rejects it: Failed in
// the API server with the reason, so that its controller replaces it
// instead of waiting on a Pending pod forever.
func TestRejectedPodIsFailedInTheAPIServer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := e.pod("huge", "sleep", "1000")
	p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1000")}
	e.create(p)
	got := e.waitPod("huge Failed in the API server", "huge", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if got.Status.Reason != "OutOfcpu" || !strings.HasPrefix(got.Status.Message, "Pod was rejected: Node didn't have enough resource: cpu") {
		t.Errorf("rejected pod's status: reason %q message %q", got.Status.Reason, got.Status.Message)
	}
}
