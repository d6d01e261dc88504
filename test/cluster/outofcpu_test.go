package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// Issue 15: a pod that asks for more CPU than its node has left ends
// Failed with reason OutOfcpu in the API server, and its Deployment gets a
// replacement, which the scheduler places on another node.
//
// The node agent's admission exists for the race where the scheduler binds
// a pod from a view of the node that is already out of date: here, hog is
// bound straight to node A (spec.nodeName, bypassing the scheduler) and
// takes three quarters of A's CPU after the scheduler chose A for web's
// pod, which asks for half. To make that race deterministic the test plays
// the scheduler for that one decision: kube-scheduler is stopped while the
// Deployment's first pod is created, and once hog runs on A the test binds
// the pod to A through the Binding subresource, as the scheduler does.
// kube-scheduler, started again, then places the ReplicaSet's replacement
// from a current view: A has a quarter of its CPU left, so B.
func TestPodRejectedForCPUIsReplacedOnAnotherNode(t *testing.T) {
	t.Parallel()
	const wait = 120 * time.Second
	e := setupWith(t, clustertest.Options{ControlPlane: true})
	srv, pods := e.srv, e.srv.Admin.CoreV1().Pods("default")
	nodeA := e.a.NodeName
	b := harness.New(t)
	b.NodeName = nodeA + "-b"
	b.ExtraArgs = srv.AgentArgs(b.NodeName)
	b.Start()
	alloc := map[string]int64{}
	for _, name := range []string{nodeA, b.NodeName} {
		within(t, wait, name+" Ready and untainted", func() (bool, string) {
			n, err := srv.Admin.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c := readyCondition(n)
			alloc[name] = n.Status.Allocatable.Cpu().MilliValue()
			return c != nil && c.Status == v1.ConditionTrue && len(n.Spec.Taints) == 0, fmt.Sprintf("Ready %+v taints %v", c, n.Spec.Taints)
		})
	}
	webCPU, hogCPU := alloc[nodeA]/2, alloc[nodeA]*3/4
	if webCPU > alloc[b.NodeName] || webCPU == 0 {
		t.Fatalf("allocatable cpu %v: web's %dm must fit B", alloc, webCPU)
	}
	t.Logf("allocatable cpu %v; hog asks %dm on A, web %dm", alloc, hogCPU, webCPU)

	srv.StopComponent(clusterbin.Scheduler)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []v1.Container{{
						Name: "main", Image: "host", Command: []string{"sleep", "1000"},
						Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(webCPU, resource.DecimalSI)}},
					}},
				},
			},
		},
	}
	if _, err := srv.Admin.AppsV1().Deployments("default").Create(e.ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webPods := func() []v1.Pod {
		list, err := pods.List(e.ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	var first v1.Pod
	within(t, wait, "the Deployment's first pod, unscheduled", func() (bool, string) {
		ps := webPods()
		if len(ps) != 1 {
			return false, fmt.Sprintf("%d pods", len(ps))
		}
		first = ps[0]
		return first.Spec.NodeName == "", "bound to " + first.Spec.NodeName
	})

	hog := e.pod("hog", "sleep", "1000")
	hog.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(hogCPU, resource.DecimalSI)}
	e.create(hog)
	e.waitPod("hog Running on A", "hog", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	bind := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: first.Name, UID: first.UID},
		Target:     v1.ObjectReference{Kind: "Node", Name: nodeA},
	}
	if err := pods.Bind(e.ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding %s to %s: %v", first.Name, nodeA, err)
	}
	bound := time.Now()
	srv.StartComponent(clusterbin.Scheduler)

	var rejected *v1.Pod
	within(t, wait, first.Name+" Failed in the API server", func() (bool, string) {
		p, err := pods.Get(e.ctx, first.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		rejected = p
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("phase %q reason %q", p.Status.Phase, p.Status.Reason)
	})
	failedAfter := time.Since(bound)
	if rejected.Status.Reason != "OutOfcpu" || !strings.HasPrefix(rejected.Status.Message, "Pod was rejected: Node didn't have enough resource: cpu") {
		t.Errorf("rejected pod's status: reason %q message %q", rejected.Status.Reason, rejected.Status.Message)
	}

	var replacement v1.Pod
	within(t, wait, "a replacement Running and Ready on B", func() (bool, string) {
		var seen []string
		for _, p := range webPods() {
			seen = append(seen, fmt.Sprintf("%s on %q %s", p.Name, p.Spec.NodeName, p.Status.Phase))
			if p.UID != first.UID && p.Spec.NodeName == b.NodeName && runningReady(&p) {
				replacement = p
				return true, ""
			}
		}
		return false, strings.Join(seen, ", ")
	})
	t.Logf("%s rejected on A (%s), Failed in the API server %s after its binding; replacement %s Running and Ready on B %s after the binding",
		first.Name, rejected.Status.Message, failedAfter.Round(100*time.Millisecond), replacement.Name, time.Since(bound).Round(100*time.Millisecond))
	within(t, wait, "the Deployment available", func() (bool, string) {
		d, err := srv.Admin.AppsV1().Deployments("default").Get(e.ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == 1, fmt.Sprintf("available %d", d.Status.AvailableReplicas)
	})
	// A never ran the rejected pod, and still runs hog.
	if p, ok := e.a.Pod(first.Name); ok && p.Status.Phase != v1.PodFailed {
		t.Errorf("node A's own view of %s: %s", first.Name, p.Status.Phase)
	}
	if p, ok := e.a.Pod("hog"); !ok || p.Status.Phase != v1.PodRunning {
		t.Errorf("hog on A after the rejection: %+v (found %v)", p.Status, ok)
	}
}
