package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/qos"
)

// fakeResize is the node side of an in-place resize: cgroup values from
// the container's resources, a node of capacityMilli cpu, and the runtime
// updates it was asked for (applied to the fake runtime's containers).
type fakeResize struct {
	rt            *fakeRuntime
	capacityMilli int64
	updates       []string // container ID: quota
	unbound       int
}

func (f *fakeResize) ContainerResources(_ *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources {
	return &runtimeapi.LinuxContainerResources{
		CpuShares:          int64(qos.MilliCPUToShares(qos.MilliCPU(c.Resources.Requests))),
		CpuQuota:           qos.MilliCPUToQuota(qos.MilliCPU(c.Resources.Limits), qos.DefaultCFSPeriod),
		CpuPeriod:          qos.DefaultCFSPeriod,
		MemoryLimitInBytes: qos.MemoryBytes(c.Resources.Limits),
	}
}

func (f *fakeResize) UnboundPodCPU(*v1.Pod) error { f.unbound++; return nil }

func (f *fakeResize) Admit(pod *v1.Pod, active []*v1.Pod) (bool, string, string) {
	req, used := qos.MilliCPU(qos.PodRequests(pod)), int64(0)
	for _, p := range active {
		used += qos.MilliCPU(qos.PodRequests(p))
	}
	if req+used > f.capacityMilli {
		return false, "OutOfcpu", fmt.Sprintf("Node didn't have enough resource: cpu, requested: %d, used: %d, capacity: %d", req, used, f.capacityMilli)
	}
	return true, "", ""
}

func (f *fakeResize) UpdateContainerResources(_ context.Context, id string, res *runtimeapi.LinuxContainerResources) error {
	f.updates = append(f.updates, fmt.Sprintf("%s:%d", id, res.CpuQuota))
	for _, ps := range f.rt.pods {
		for _, c := range ps.Containers {
			if c.ID.ID == id {
				c.Resources = res
			}
		}
	}
	return nil
}

// withResize wires in-place resize over fakes, on a node of 2 cpus.
func withResize(f **fakeResize) harnessOption {
	return func(h *harness, _ *LoopConfig) {
		*f = &fakeResize{rt: h.rt, capacityMilli: 2000}
		h.resize = &ResizeConfig{Cgroups: *f, Runtime: *f}
		h.rt.resources = (*f).ContainerResources
	}
}

func withCPU(p *v1.Pod, gen int64, req, lim string) *v1.Pod {
	p = p.DeepCopy()
	p.Generation = gen
	p.ResourceVersion = fmt.Sprint(gen)
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(req)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(lim)},
	}
	return p
}

func podCondition(st v1.PodStatus, typ v1.PodConditionType) *v1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

func TestResizeInPlaceUpdatesTheRunningContainer(t *testing.T) {
	var f *fakeResize
	h := newHarness(t, withSources("api"), withResize(&f))
	pod := withCPU(apiPod("uid-r", "web", "app"), 1, "100m", "200m")
	h.snapshot("api", pod)
	if got := h.rt.attempts(pod.UID, "app"); got != 1 {
		t.Fatalf("%d attempts of app, want 1", got)
	}

	resized := withCPU(pod, 2, "150m", "300m")
	h.snapshot("api", resized)

	if got := h.rt.attempts(pod.UID, "app"); got != 1 {
		t.Errorf("the resize restarted app (%d attempts); its resizePolicy asks for none", got)
	}
	if len(f.updates) != 1 || !strings.HasSuffix(f.updates[0], ":30000") || f.unbound != 1 {
		t.Errorf("runtime updates %v (pod CPU unbound %d times), want one with quota 30000 after the pod's bound is lifted", f.updates, f.unbound)
	}
	st := h.status(pod)
	cs := st.ContainerStatuses[0]
	if q := cs.AllocatedResources[v1.ResourceCPU]; q.String() != "150m" {
		t.Errorf("allocatedResources cpu %s, want 150m", q.String())
	}
	if cs.Resources == nil || cs.Resources.Limits.Cpu().String() != "300m" || cs.Resources.Requests.Cpu().String() != "150m" {
		t.Errorf("status resources %+v, want requests 150m limits 300m", cs.Resources)
	}
	if q := st.AllocatedResources[v1.ResourceCPU]; q.String() != "150m" {
		t.Errorf("pod allocatedResources cpu %s, want 150m: what its containers request together", q.String())
	}
	if st.ObservedGeneration != 2 {
		t.Errorf("observedGeneration %d, want 2", st.ObservedGeneration)
	}
	if c := podCondition(st, v1.PodResizeInProgress); c != nil {
		t.Errorf("resize still in progress: %+v", c)
	}
	ev := h.rec.String()
	if !strings.Contains(ev, "Normal ResizeStarted Pod resize started: ") || !strings.Contains(ev, `"generation":2`) ||
		!strings.Contains(ev, "Normal ResizeCompleted Pod resize completed: ") {
		t.Errorf("events:\n%s\nwant ResizeStarted and ResizeCompleted for generation 2", ev)
	}
	if strings.Count(ev, "ResizeCompleted") != 1 {
		t.Errorf("ResizeCompleted reported %d times, want once:\n%s", strings.Count(ev, "ResizeCompleted"), ev)
	}
}

func TestResizeRestartsWhereTheResizePolicySays(t *testing.T) {
	var f *fakeResize
	h := newHarness(t, withSources("api"), withResize(&f))
	pod := withCPU(apiPod("uid-r", "web", "app"), 1, "100m", "200m")
	pod.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceCPU, RestartPolicy: v1.RestartContainer}}
	h.snapshot("api", pod)

	h.snapshot("api", withCPU(pod, 2, "150m", "300m"))

	if got := h.rt.attempts(pod.UID, "app"); got != 2 {
		t.Fatalf("%d attempts of app, want 2: a cpu resize restarts it", got)
	}
	if len(f.updates) != 0 || f.unbound != 1 {
		t.Errorf("runtime updates %v for a container that restarts; pod CPU unbound %d times, want once (its old quota stays until it is replaced)", f.updates, f.unbound)
	}
	var killed []string
	for _, a := range h.rt.actions {
		for _, k := range a.ContainersToKill {
			killed = append(killed, k.Message)
		}
	}
	if len(killed) != 1 || killed[0] != "Container app resize requires restart" {
		t.Errorf("kills %q, want one for the resize", killed)
	}
	st := h.status(pod)
	if cs := st.ContainerStatuses[0]; cs.RestartCount != 1 || cs.Resources == nil || cs.Resources.Limits.Cpu().String() != "300m" {
		t.Errorf("status %+v, want restartCount 1 and the new limit", cs)
	}
}

func TestResizeThatCannotFitIsPending(t *testing.T) {
	var f *fakeResize
	h := newHarness(t, withSources("api"), withResize(&f))
	pod := withCPU(apiPod("uid-r", "web", "app"), 1, "100m", "200m")
	other := withCPU(apiPod("uid-o", "other", "app"), 1, "1500m", "1500m")
	h.snapshot("api", pod, other)

	h.snapshot("api", withCPU(pod, 2, "3", "3"), other)
	st := h.status(pod)
	c := podCondition(st, v1.PodResizePending)
	if c == nil || c.Reason != v1.PodReasonInfeasible || !strings.Contains(c.Message, "cpu, requested: 3000") || c.ObservedGeneration != 2 {
		t.Fatalf("PodResizePending %+v, want Infeasible naming cpu for generation 2", c)
	}
	if q := st.ContainerStatuses[0].AllocatedResources[v1.ResourceCPU]; q.String() != "100m" || len(f.updates) != 0 {
		t.Errorf("allocated %s, updates %v: an infeasible resize changed what runs", q.String(), f.updates)
	}

	h.snapshot("api", withCPU(pod, 3, "600m", "600m"), other)
	st = h.status(pod)
	c = podCondition(st, v1.PodResizePending)
	if c == nil || c.Reason != v1.PodReasonDeferred {
		t.Fatalf("PodResizePending %+v, want Deferred: the other pod holds 1500m of 2000m", c)
	}
	since := c.LastTransitionTime
	h.clk.Step(time.Minute)
	h.resync(withCPU(pod, 3, "600m", "600m"))
	if c := podCondition(h.status(pod), v1.PodResizePending); c == nil || !c.LastTransitionTime.Equal(&since) {
		t.Errorf("a resize still Deferred moved its condition's transition time: %+v, was %v", c, since)
	}
	if ev := h.rec.String(); !strings.Contains(ev, "Warning ResizeInfeasible Pod resize Infeasible: ") || !strings.Contains(ev, "Warning ResizeDeferred Pod resize Deferred: ") {
		t.Errorf("events:\n%s", ev)
	}

	h.snapshot("api", withCPU(pod, 4, "400m", "400m"), other)
	st = h.status(pod)
	if c := podCondition(st, v1.PodResizePending); c != nil {
		t.Errorf("still pending after a resize that fits: %+v", c)
	}
	if q := st.ContainerStatuses[0].AllocatedResources[v1.ResourceCPU]; q.String() != "400m" {
		t.Errorf("allocated %s, want 400m", q.String())
	}
}

// A change of the memory request alone shows in no cgroup value on
// cgroup v1, yet a memory resizePolicy RestartContainer restarts the
// container for it, as the kubelet does.
func TestResizeOfAMemoryRequestRestartsByPolicy(t *testing.T) {
	var f *fakeResize
	h := newHarness(t, withSources("api"), withResize(&f))
	pod := apiPod("uid-m", "web", "app")
	pod.Generation, pod.ResourceVersion = 1, "1"
	pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("30Mi")}
	pod.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	h.snapshot("api", pod)

	resized := pod.DeepCopy()
	resized.Generation, resized.ResourceVersion = 2, "2"
	resized.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("40Mi")}
	h.snapshot("api", resized)
	if got := h.rt.attempts(pod.UID, "app"); got != 2 {
		t.Fatalf("%d attempts of app, want 2: its memory policy restarts it", got)
	}
	h.event(resized)
	if got := h.rt.attempts(pod.UID, "app"); got != 2 {
		t.Errorf("%d attempts of app after another sync, want 2: restarted once", got)
	}
}
