package qos

import (
	"github.com/minilet/minilet/internal/podspec"
	v1 "k8s.io/api/core/v1"
)

// PodRequests returns the pod's effective requests for every resource, as
// the scheduler and the kubelet count them: the sum over app containers and
// restartable (sidecar) init containers, raised to the largest ordinary init
// container (plus the sidecars started before it), plus pod overhead. The
// cpu and memory a pod sets at pod level (spec.resources) stand instead of
// the containers' sum.
func PodRequests(pod *v1.Pod) v1.ResourceList {
	return podAggregate(pod, func(c *v1.Container) v1.ResourceList { return c.Resources.Requests },
		func(r *v1.ResourceRequirements) v1.ResourceList { return r.Requests })
}

// PodLimits returns the pod's effective limits, aggregated like
// PodRequests. A resource is present only if some container limits it; use
// AllContainersLimit to know whether the sum bounds the whole pod.
func PodLimits(pod *v1.Pod) v1.ResourceList {
	return podAggregate(pod, func(c *v1.Container) v1.ResourceList { return c.Resources.Limits },
		func(r *v1.ResourceRequirements) v1.ResourceList { return r.Limits })
}

// AllContainersLimit reports whether the pod's limit of name bounds the
// whole pod: a pod-level limit, or every app container setting a non-zero
// limit. That is when the kubelet bounds the pod cgroup by it.
func AllContainersLimit(pod *v1.Pod, name v1.ResourceName) bool {
	if pod.Spec.Resources != nil {
		if q := quantityOrZero(pod.Spec.Resources.Limits, name); !q.IsZero() {
			return true
		}
	}
	for i := range pod.Spec.Containers {
		q := quantityOrZero(pod.Spec.Containers[i].Resources.Limits, name)
		if q.IsZero() {
			return false
		}
	}
	return true
}

func podAggregate(pod *v1.Pod, get func(*v1.Container) v1.ResourceList, podLevel func(*v1.ResourceRequirements) v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for i := range pod.Spec.Containers {
		addList(out, get(&pod.Spec.Containers[i]))
	}
	sidecars := v1.ResourceList{}
	initMax := v1.ResourceList{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		var need v1.ResourceList
		if podspec.IsSidecar(c) {
			// A sidecar keeps running next to the app containers.
			addList(out, get(c))
			addList(sidecars, get(c))
			need = sidecars
		} else {
			need = v1.ResourceList{}
			addList(need, get(c))
			addList(need, sidecars)
		}
		maxList(initMax, need)
	}
	maxList(out, initMax)
	if pod.Spec.Resources != nil {
		out = withPodLevel(out, podLevel(pod.Spec.Resources))
	}
	if pod.Spec.Overhead != nil {
		addList(out, pod.Spec.Overhead)
	}
	return out
}

func addList(dst, src v1.ResourceList) {
	for name, q := range src {
		sum := q.DeepCopy()
		if cur, ok := dst[name]; ok {
			sum.Add(cur)
		}
		dst[name] = sum
	}
}

func maxList(dst, src v1.ResourceList) {
	for name, q := range src {
		if cur, ok := dst[name]; !ok || q.Cmp(cur) > 0 {
			dst[name] = q.DeepCopy()
		}
	}
}

// MilliCPU returns the cpu quantity of l in millicores (0 when absent).
func MilliCPU(l v1.ResourceList) int64 {
	q := quantityOrZero(l, v1.ResourceCPU)
	return q.MilliValue()
}

// MemoryBytes returns the memory quantity of l in bytes (0 when absent).
func MemoryBytes(l v1.ResourceList) int64 {
	q := quantityOrZero(l, v1.ResourceMemory)
	return q.Value()
}
