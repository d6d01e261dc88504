package eviction

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/minilet/minilet/internal/qos"
)

// evictionMessage explains an eviction in the kubelet's words: the
// resource, the threshold and what was available, and for memory each
// container using more than it requested.
func evictionMessage(th Threshold, obs Observations, pod *v1.Pod, u PodUsage, known bool) string {
	res := signalResource[th.Signal]
	var b strings.Builder
	fmt.Fprintf(&b, "The node was low on resource: %v. ", res)
	if o, ok := obs[th.Signal]; ok {
		fmt.Fprintf(&b, "Threshold quantity: %v, available: %v. ",
			formatQuantity(th.Signal, quantity(th.Value, o.Capacity)), formatQuantity(th.Signal, o.Available))
	}
	if res != v1.ResourceMemory || !known {
		return b.String()
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		used, ok := u.Containers[c.Name]
		if !ok {
			continue
		}
		req := c.Resources.Requests[v1.ResourceMemory]
		if used > req.Value() {
			fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %v. ",
				c.Name, resource.NewQuantity(used, resource.BinarySI), req.String(), res)
		}
	}
	return b.String()
}

func podQOS(p *v1.Pod) v1.PodQOSClass {
	if p.Status.QOSClass != "" {
		return p.Status.QOSClass
	}
	return qos.PodQOSClass(p)
}

// toleratesMemoryPressure reports whether the pod tolerates the
// node.kubernetes.io/memory-pressure:NoSchedule taint.
func toleratesMemoryPressure(p *v1.Pod) bool {
	for _, t := range p.Spec.Tolerations {
		if t.Effect != "" && t.Effect != v1.TaintEffectNoSchedule {
			continue
		}
		switch {
		case t.Key == "" && t.Operator == v1.TolerationOpExists:
			return true
		case t.Key == v1.TaintNodeMemoryPressure && t.Operator == v1.TolerationOpExists:
			return true
		case t.Key == v1.TaintNodeMemoryPressure && (t.Operator == "" || t.Operator == v1.TolerationOpEqual) && t.Value == "":
			return true
		}
	}
	return false
}
