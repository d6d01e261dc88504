package qos

import (
	v1 "k8s.io/api/core/v1"
)

// PodLevelResourcesSet reports whether the pod sets pod-level (spec.resources)
// requests or limits of cpu or memory, the resources pod-level resources
// may bound (PodLevelResources, beta and on since 1.34). Such a pod's
// cgroup, QoS class and summed requests come from spec.resources.
func PodLevelResourcesSet(pod *v1.Pod) bool {
	if pod.Spec.Resources == nil {
		return false
	}
	for _, l := range []v1.ResourceList{pod.Spec.Resources.Requests, pod.Spec.Resources.Limits} {
		for name := range l {
			if isQOSResource(name) {
				return true
			}
		}
	}
	return false
}

// withPodLevel overrides the cpu and memory of agg (the containers' sum)
// with those the pod sets in l (its spec.resources requests or limits).
func withPodLevel(agg, l v1.ResourceList) v1.ResourceList {
	for name, q := range l {
		if isQOSResource(name) {
			agg[name] = q.DeepCopy()
		}
	}
	return agg
}

// podLevelQOSClass is the QoS class of a pod that sets pod-level resources:
// decided by spec.resources alone, Guaranteed when it limits both cpu and
// memory and requests what it limits.
func podLevelQOSClass(pod *v1.Pod) v1.PodQOSClass {
	requests, limits := v1.ResourceList{}, v1.ResourceList{}
	addPositive(requests, pod.Spec.Resources.Requests)
	found := addPositive(limits, pod.Spec.Resources.Limits)
	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if !found[v1.ResourceCPU] || !found[v1.ResourceMemory] || len(requests) != len(limits) {
		return v1.PodQOSBurstable
	}
	for name, req := range requests {
		if lim := limits[name]; lim.Cmp(req) != 0 {
			return v1.PodQOSBurstable
		}
	}
	return v1.PodQOSGuaranteed
}
