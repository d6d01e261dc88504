// Package qos holds the kubelet's pure resource rules: a pod's QoS class,
// its summed requests and limits, the conversions from millicores to CFS
// shares, quota and cgroup v2 weight, the OOM score policy and the
// qos-reserved memory formulas. Nothing here touches the machine.
package qos

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// qosResources are the only resources that decide a pod's QoS class.
var qosResources = [...]v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory}

func isQOSResource(name v1.ResourceName) bool {
	return name == v1.ResourceCPU || name == v1.ResourceMemory
}

// PodQOSClass computes the pod's QoS class the way Kubernetes does: only
// cpu and memory count, init containers are included, and a pod is
// Guaranteed only when every container (init containers too) sets non-zero
// cpu and memory limits and the summed requests equal the summed limits.
// pod.Status.QOSClass is ignored; the class is always recomputed. A pod
// with pod-level resources is classed by them alone.
func PodQOSClass(pod *v1.Pod) v1.PodQOSClass {
	if PodLevelResourcesSet(pod) {
		return podLevelQOSClass(pod)
	}
	requests := v1.ResourceList{}
	limits := v1.ResourceList{}
	guaranteed := true

	all := make([]v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	all = append(all, pod.Spec.Containers...)
	all = append(all, pod.Spec.InitContainers...)
	for i := range all {
		c := &all[i]
		addPositive(requests, c.Resources.Requests)
		found := addPositive(limits, c.Resources.Limits)
		for _, name := range qosResources {
			if !found[name] {
				guaranteed = false
			}
		}
	}

	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			lim, ok := limits[name]
			if !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

// addPositive adds the strictly positive cpu and memory quantities of src
// to dst and reports which of them it saw.
func addPositive(dst, src v1.ResourceList) map[v1.ResourceName]bool {
	found := map[v1.ResourceName]bool{}
	for name, q := range src {
		if !isQOSResource(name) || q.Sign() <= 0 {
			continue
		}
		found[name] = true
		sum := q.DeepCopy()
		if cur, ok := dst[name]; ok {
			sum.Add(cur)
		}
		dst[name] = sum
	}
	return found
}

// IsNodeCritical reports whether the pod is a node-critical pod (static or
// mirror, or of system-critical priority, and of the system-node-critical
// priority class); such pods get the Guaranteed OOM score.
func IsNodeCritical(pod *v1.Pod) bool {
	const systemCriticalPriority = 2 * 1000000000
	critical := false
	if src := pod.Annotations["kubernetes.io/config.source"]; src != "" && src != "api" {
		critical = true
	}
	if _, ok := pod.Annotations["kubernetes.io/config.mirror"]; ok {
		critical = true
	}
	if pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority {
		critical = true
	}
	return critical && pod.Spec.PriorityClassName == "system-node-critical"
}

// quantityOrZero returns the named quantity or zero.
func quantityOrZero(l v1.ResourceList, name v1.ResourceName) resource.Quantity {
	if q, ok := l[name]; ok {
		return q
	}
	return resource.Quantity{}
}
