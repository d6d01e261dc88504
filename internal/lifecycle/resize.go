package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/qos"
)

// The kubelet's event reasons for an in-place pod resize.
const (
	ReasonResizeStarted    = "ResizeStarted"
	ReasonResizeCompleted  = "ResizeCompleted"
	ReasonResizeDeferred   = "ResizeDeferred"
	ReasonResizeInfeasible = "ResizeInfeasible"
	ReasonResizeError      = "ResizeError"
)

// resizeRetry is how soon a resize that could not be carried out or did
// not fit is tried again.
const resizeRetry = 10 * time.Second

// ResizeConfig is what an in-place resize needs beyond the sync's own
// dependencies.
type ResizeConfig struct {
	// Cgroups computes a container's cgroup values, widens a pod's CPU
	// bound while its containers change, and says whether a pod's new
	// requests fit the node (internal/cm).
	Cgroups interface {
		ContainerResources(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources
		UnboundPodCPU(pod *v1.Pod) error
		Admit(pod *v1.Pod, active []*v1.Pod) (ok bool, reason, message string)
	}
	// Runtime changes a running container's resources (internal/kuberuntime).
	Runtime interface {
		UpdateContainerResources(ctx context.Context, id string, res *runtimeapi.LinuxContainerResources) error
	}
}

// allocation is what the node granted one pod, the kubelet's "allocated
// resources": every container's resources and the pod-level ones. The
// pod runs by it; a spec asking for more or less is a resize, allocated
// once it fits the node.
type allocation struct {
	containers map[string]v1.ResourceRequirements
	pod        *v1.ResourceRequirements
	// pending is the PodResizePending condition of a resize that does
	// not fit (nil: none waits).
	pending *v1.PodCondition
	// started: a resize was allocated and its completion not reported.
	started bool
	// warned is the generation whose pending resize has its event.
	warned int64
	// restart names the containers an allocated resize restarts: one of
	// the resources it changes has resizePolicy RestartContainer (a
	// change of a memory request restarts too, though no cgroup value
	// shows it on cgroup v1).
	restart map[string]bool
}

func newAllocation(pod *v1.Pod) *allocation {
	a := &allocation{containers: map[string]v1.ResourceRequirements{}}
	a.take(pod)
	return a
}

// take allocates what pod's spec asks for.
func (a *allocation) take(pod *v1.Pod) {
	for _, c := range allContainers(pod) {
		a.containers[c.Name] = *c.Resources.DeepCopy()
	}
	a.pod = pod.Spec.Resources.DeepCopy()
}

// markRestarts notes the containers that pod's resize restarts: those
// whose cpu or memory changes from what is allocated and whose
// resizePolicy for that resource is RestartContainer.
func (a *allocation) markRestarts(pod *v1.Pod) {
	for _, c := range allContainers(pod) {
		old := a.containers[c.Name]
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			changed := !old.Requests[name].Equal(c.Resources.Requests[name]) || !old.Limits[name].Equal(c.Resources.Limits[name])
			if changed && resizePolicy(c, name) == v1.RestartContainer {
				if a.restart == nil {
					a.restart = map[string]bool{}
				}
				a.restart[c.Name] = true
			}
		}
	}
}

// matches reports whether pod's spec asks for what is allocated.
func (a *allocation) matches(pod *v1.Pod) bool {
	for _, c := range allContainers(pod) {
		if got, ok := a.containers[c.Name]; !ok || !equality.Semantic.DeepEqual(got, c.Resources) {
			return false
		}
	}
	return equality.Semantic.DeepEqual(a.pod, pod.Spec.Resources)
}

// apply returns pod as the node runs it: with the allocated resources.
func (a *allocation) apply(pod *v1.Pod) *v1.Pod {
	out := pod.DeepCopy()
	for _, cs := range [][]v1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range cs {
			if r, ok := a.containers[cs[i].Name]; ok {
				cs[i].Resources = *r.DeepCopy()
			}
		}
	}
	out.Spec.Resources = a.pod.DeepCopy()
	return out
}

// allocations holds every running pod's allocation.
type allocations struct {
	mu   sync.Mutex
	pods map[types.UID]*allocation
}

func (as *allocations) get(uid types.UID) *allocation {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.pods[uid]
}

func (as *allocations) set(uid types.UID, a *allocation) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.pods == nil {
		as.pods = map[types.UID]*allocation{}
	}
	as.pods[uid] = a
}

func (as *allocations) forget(uid types.UID) {
	as.mu.Lock()
	defer as.mu.Unlock()
	delete(as.pods, uid)
}

// allocate returns pod as the node is to run it. The first time, that is
// its spec (the pod was admitted as it is). After that a spec asking for
// other resources is an in-place resize: allocated when the pod's new
// requests fit next to the other pods', else left pending with the
// kubelet's PodResizePending condition (Infeasible when the node could
// never hold it, Deferred when other pods are in its way) and event.
func (s *Syncer) allocate(pod *v1.Pod) (*v1.Pod, *allocation) {
	a := s.allocs.get(pod.UID)
	if a == nil {
		a = newAllocation(pod)
		s.allocs.set(pod.UID, a)
		return pod, a
	}
	if a.matches(pod) {
		a.pending = nil
		return pod, a
	}
	if s.cfg.Resize == nil { // in-place resize is not wired: run the spec
		a.take(pod)
		return pod, a
	}
	reason, event, msg := "", "", ""
	if ok, _, m := s.cfg.Resize.Cgroups.Admit(pod, nil); !ok {
		reason, event, msg = v1.PodReasonInfeasible, ReasonResizeInfeasible, m
	} else if ok, _, m := s.cfg.Resize.Cgroups.Admit(pod, s.othersAllocated(pod.UID)); !ok {
		reason, event, msg = v1.PodReasonDeferred, ReasonResizeDeferred, m
	}
	if reason != "" {
		since := nowTime(s)
		if a.pending != nil && a.pending.Reason == reason {
			since = a.pending.LastTransitionTime // still pending: no new transition
		}
		a.pending = &v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: reason, Message: msg,
			ObservedGeneration: pod.Generation, LastTransitionTime: since}
		if a.warned != pod.Generation {
			a.warned = pod.Generation
			s.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, event, "Pod resize %s: %s", reason, resizeSummary(pod, msg))
		}
		return a.apply(pod), a
	}
	a.markRestarts(pod)
	a.take(pod)
	a.pending, a.started = nil, true
	s.log.Info("in-place resize allocated", "pod", podRef(pod), "generation", pod.Generation)
	s.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, ReasonResizeStarted, "Pod resize started: %s", resizeSummary(pod, ""))
	return pod, a
}

// othersAllocated are the node's other active pods as they run: with
// their allocated resources.
func (s *Syncer) othersAllocated(uid types.UID) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range s.cfg.Pods.Active() {
		if p.UID == uid {
			continue
		}
		if a := s.allocs.get(p.UID); a != nil {
			p = a.apply(p)
		}
		out = append(out, p)
	}
	return out
}

// containerUpdate is a running container whose resources change in place.
type containerUpdate struct {
	name, id string
	res      *runtimeapi.LinuxContainerResources
}

// resizeActions compares each running container's applied resources (as
// the runtime reports them) with its allocation: a change of a resource
// whose resizePolicy is RestartContainer restarts the container (the
// Killing message, by name), as does a resize a marked for restart; any
// other change is made in place.
func (s *Syncer) resizeActions(pod *v1.Pod, a *allocation, rs *container.PodStatus) (updates []containerUpdate, restarts map[string]string) {
	if s.cfg.Resize == nil || rs == nil {
		return nil, nil
	}
	restart := func(name string) {
		if restarts == nil {
			restarts = map[string]string{}
		}
		restarts[name] = fmt.Sprintf("Container %s resize requires restart", name)
	}
	for _, c := range allContainers(pod) {
		st := rs.FindContainer(c.Name)
		if st == nil || st.State != container.StateRunning {
			continue
		}
		if a.restart[c.Name] {
			delete(a.restart, c.Name) // this sync restarts it
			restart(c.Name)
			continue
		}
		if st.Resources == nil {
			continue
		}
		want := s.cfg.Resize.Cgroups.ContainerResources(pod, c)
		cpu, mem := resourcesDiffer(st.Resources, want)
		if !cpu && !mem {
			continue
		}
		if (cpu && resizePolicy(c, v1.ResourceCPU) == v1.RestartContainer) || (mem && resizePolicy(c, v1.ResourceMemory) == v1.RestartContainer) {
			restart(c.Name)
			continue
		}
		updates = append(updates, containerUpdate{name: c.Name, id: st.ID.ID, res: want})
	}
	return updates, restarts
}

// resizeInPlace applies updates: the pod's CPU bound is lifted first (a
// CFS quota of a child may not exceed its parent's, so a container's
// lower quota and the pod's lower bound can only be set in that order),
// then each container is updated; the pod cgroup gets its final values
// from EnsurePod after that, and after the containers a resize restarts
// (restarting) are replaced.
func (s *Syncer) resizeInPlace(ctx context.Context, pod *v1.Pod, updates []containerUpdate, restarting bool) error {
	if len(updates) == 0 && !restarting {
		return nil
	}
	if err := s.cfg.Resize.Cgroups.UnboundPodCPU(pod); err != nil {
		s.log.Warn("lifting the pod's CPU bound for a resize", "pod", podRef(pod), "err", err)
	}
	for _, u := range updates {
		if err := s.cfg.Resize.Runtime.UpdateContainerResources(ctx, u.id, u.res); err != nil {
			err = fmt.Errorf("resizing container %s of pod %s: %w", u.name, podRef(pod), err)
			s.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, ReasonResizeError, "Pod resize error: %s", resizeSummary(pod, err.Error()))
			return err
		}
	}
	return nil
}

// resizeStatus fills what the status says of resources: each container's
// allocated requests and, while it runs, the resources it runs with; the
// pod-level ones; the PodResizePending and PodResizeInProgress
// conditions; and the generation observed. It reports a resize that is
// complete once with the kubelet's ResizeCompleted event.
func (s *Syncer) resizeStatus(st *v1.PodStatus, pod, allocated *v1.Pod, a *allocation, rs *container.PodStatus) {
	st.ObservedGeneration = pod.Generation
	inProgress := false
	fill := func(statuses []v1.ContainerStatus, specs []v1.Container) {
		for i := range statuses {
			cs := &statuses[i]
			c := findContainer(specs, cs.Name)
			if c == nil {
				continue
			}
			cs.AllocatedResources = c.Resources.Requests.DeepCopy()
			cs.Resources = nil
			if cs.State.Running == nil {
				continue
			}
			r := c.Resources.DeepCopy()
			cs.Resources = r
			if s.cfg.Resize == nil {
				continue
			}
			if rst := rs.FindContainer(c.Name); rst != nil && rst.State == container.StateRunning && rst.Resources != nil {
				want := s.cfg.Resize.Cgroups.ContainerResources(allocated, c)
				if cpu, mem := resourcesDiffer(rst.Resources, want); cpu || mem {
					inProgress = true
					cs.Resources = appliedResources(r, rst.Resources)
				}
			}
		}
	}
	fill(st.InitContainerStatuses, allocated.Spec.InitContainers)
	fill(st.ContainerStatuses, allocated.Spec.Containers)
	// The pod's allocation: its pod-level requests, else what its
	// containers request together; its pod-level resources, if any.
	st.AllocatedResources, st.Resources = nil, nil
	if allocated.Spec.Resources != nil {
		st.AllocatedResources = allocated.Spec.Resources.Requests.DeepCopy()
		st.Resources = allocated.Spec.Resources.DeepCopy()
	} else if reqs := qos.PodRequests(allocated); len(reqs) > 0 {
		st.AllocatedResources = reqs
	}

	conds := st.Conditions[:0]
	for _, c := range st.Conditions {
		if c.Type != v1.PodResizePending && c.Type != v1.PodResizeInProgress {
			conds = append(conds, c)
		}
	}
	st.Conditions = conds
	if a == nil {
		return
	}
	if a.pending != nil {
		st.Conditions = append(st.Conditions, *a.pending)
	}
	if inProgress {
		st.Conditions = append(st.Conditions, v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue,
			ObservedGeneration: pod.Generation, LastTransitionTime: nowTime(s)})
		return
	}
	if a.started {
		a.started = false
		s.cfg.Recorder.Eventf(pod, v1.EventTypeNormal, ReasonResizeCompleted, "Pod resize completed: %s", resizeSummary(allocated, ""))
	}
}

// resourcesDiffer compares applied container resources with wanted ones:
// whether the cpu (shares, quota) and the memory limit differ. Values the
// runtime does not report (0 shares) are not compared; no quota and no
// memory limit compare equal however they are written (0 or -1).
func resourcesDiffer(got, want *runtimeapi.LinuxContainerResources) (cpu, mem bool) {
	none := func(v int64) int64 {
		if v <= 0 {
			return 0
		}
		return v
	}
	cpu = (got.CpuShares != 0 && got.CpuShares != want.CpuShares) || none(got.CpuQuota) != none(want.CpuQuota)
	mem = none(got.MemoryLimitInBytes) != none(want.MemoryLimitInBytes)
	return cpu, mem
}

// appliedResources is what a container runs with while its resize is in
// progress: its allocation, with cpu and memory as the runtime applied
// them.
func appliedResources(alloc *v1.ResourceRequirements, got *runtimeapi.LinuxContainerResources) *v1.ResourceRequirements {
	r := alloc.DeepCopy()
	if _, ok := r.Requests[v1.ResourceCPU]; ok && got.CpuShares > 0 {
		r.Requests[v1.ResourceCPU] = *resourceMilli(sharesToMilliCPU(got.CpuShares))
	}
	if _, ok := r.Limits[v1.ResourceCPU]; ok && got.CpuQuota > 0 && got.CpuPeriod > 0 {
		r.Limits[v1.ResourceCPU] = *resourceMilli(got.CpuQuota * 1000 / got.CpuPeriod)
	}
	if _, ok := r.Limits[v1.ResourceMemory]; ok && got.MemoryLimitInBytes > 0 {
		r.Limits[v1.ResourceMemory] = *resourceBytes(got.MemoryLimitInBytes)
	}
	return r
}

// resizePolicy is c's resize restart policy for resource name
// (NotRequired unless it says otherwise).
func resizePolicy(c *v1.Container, name v1.ResourceName) v1.ResourceResizeRestartPolicy {
	for _, p := range c.ResizePolicy {
		if p.ResourceName == name {
			return p.RestartPolicy
		}
	}
	return v1.NotRequired
}

// resizeSummary is the kubelet's resize event detail: the resources of
// every container as JSON, with the pod's generation and an error.
func resizeSummary(pod *v1.Pod, errMsg string) string {
	type entry struct {
		Name      string                  `json:"name"`
		Resources v1.ResourceRequirements `json:"resources"`
	}
	var sum struct {
		InitContainers []entry `json:"initContainers,omitempty"`
		Containers     []entry `json:"containers,omitempty"`
		Generation     int64   `json:"generation,omitempty"`
		Error          string  `json:"error,omitempty"`
	}
	for _, c := range pod.Spec.InitContainers {
		sum.InitContainers = append(sum.InitContainers, entry{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		sum.Containers = append(sum.Containers, entry{c.Name, c.Resources})
	}
	sum.Generation, sum.Error = pod.Generation, errMsg
	b, err := json.Marshal(sum)
	if err != nil {
		return errMsg
	}
	return string(b)
}

// allContainers are pod's init and app containers.
func allContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

func findContainer(cs []v1.Container, name string) *v1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func nowTime(s *Syncer) metav1.Time { return metav1.NewTime(s.cfg.Clock.Now()) }

// sharesToMilliCPU turns CFS shares back into millicores, as the kubelet
// reads a running container's cpu request (the minimum shares are none).
func sharesToMilliCPU(shares int64) int64 {
	if shares <= int64(qos.MinShares) {
		return 0
	}
	return (shares*1000 + 1023) / 1024
}

func resourceMilli(m int64) *resource.Quantity {
	return resource.NewMilliQuantity(m, resource.DecimalSI)
}
func resourceBytes(b int64) *resource.Quantity { return resource.NewQuantity(b, resource.BinarySI) }
