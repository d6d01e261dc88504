package status

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/minilet/minilet/internal/qos"
)

// QOSClass computes the pod's quality-of-service class by the Kubernetes
// rules, looking at cpu and memory of every init and app container:
//
//   - BestEffort: no container sets a cpu or memory request or limit;
//   - Guaranteed: every container sets cpu and memory limits, and its
//     requests (where set) equal them;
//   - Burstable: anything else.
//
// A request left unset while its limit is set counts as equal to the limit,
// which is what the API server's defaulting would have made of it; in
// standalone mode nothing defaults the pod before it reaches us.
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	if qos.PodLevelResourcesSet(pod) {
		return qos.PodQOSClass(pod) // by spec.resources alone
	}
	requests := v1.ResourceList{}
	limits := v1.ResourceList{}
	guaranteed := true
	visit := func(c *v1.Container) {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			limit, hasLimit := c.Resources.Limits[name]
			hasLimit = hasLimit && !limit.IsZero()
			req, hasReq := c.Resources.Requests[name]
			hasReq = hasReq && !req.IsZero()
			if !hasReq && hasLimit {
				req, hasReq = limit, true
			}
			if hasReq {
				addQuantity(requests, name, req)
			}
			if hasLimit {
				addQuantity(limits, name, limit)
			} else {
				guaranteed = false
			}
			if hasReq && hasLimit && req.Cmp(limit) != 0 {
				guaranteed = false
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		visit(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[i])
	}
	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if guaranteed {
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

func addQuantity(list v1.ResourceList, name v1.ResourceName, q resource.Quantity) {
	sum, ok := list[name]
	if !ok {
		list[name] = q.DeepCopy()
		return
	}
	sum.Add(q)
	list[name] = sum
}
