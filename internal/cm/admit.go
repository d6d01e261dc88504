package cm

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/qos"
)

// Admission results.
const (
	// ReasonFailedValidation rejects a pod whose resources are invalid
	// (negative, or requests above limits).
	ReasonFailedValidation = "FailedValidation"
)

// Admit decides whether pod fits next to activePods (the pods already
// admitted and not terminated; pod itself is skipped if present), as the
// kubelet's resource-fit admission does: the pod count, then cpu, memory,
// ephemeral-storage and other resources the node has, comparing the pod's
// requests plus those of the active pods against allocatable. On
// rejection, reason is OutOf<resource> (OutOfcpu, OutOfmemory, OutOfpods,
// OutOfexample.com/gpu, ...) or FailedValidation, and message is e.g.
// "Node didn't have enough resource: cpu, requested: 500, used: 1500,
// capacity: 2000". The caller records a Warning event (reason, message) and
// sets the pod Failed with Reason reason and the kubelet's "Pod was
// rejected: " message (status.Failed).
// Extended resources the node does not advertise at all are left to the
// device manager.
func (m *Manager) Admit(pod *v1.Pod, activePods []*v1.Pod) (ok bool, reason, message string) {
	if err := ValidatePodResources(pod); err != nil {
		return false, ReasonFailedValidation, err.Error()
	}
	alloc := m.admissionAllocatable()
	others := make([]*v1.Pod, 0, len(activePods))
	for _, p := range activePods {
		if p.UID != pod.UID {
			others = append(others, p)
		}
	}
	if f := checkFit(pod, others, alloc); f != nil {
		return false, "OutOf" + string(f.name), f.Error()
	}
	return true, "", ""
}

// insufficient is one resource that does not fit.
type insufficient struct {
	name                      v1.ResourceName
	requested, used, capacity int64
}

func (f *insufficient) Error() string {
	return fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
		f.name, f.requested, f.used, f.capacity)
}

// checkFit returns the first resource that does not fit, or nil.
func checkFit(pod *v1.Pod, others []*v1.Pod, alloc v1.ResourceList) *insufficient {
	podsCap := alloc[v1.ResourcePods]
	if int64(len(others))+1 > podsCap.Value() {
		return &insufficient{name: v1.ResourcePods, requested: 1, used: int64(len(others)), capacity: podsCap.Value()}
	}
	req := qos.PodRequests(pod)
	used := v1.ResourceList{}
	for _, p := range others {
		for name, q := range qos.PodRequests(p) {
			sum := q.DeepCopy()
			if cur, ok := used[name]; ok {
				sum.Add(cur)
			}
			used[name] = sum
		}
	}
	value := func(l v1.ResourceList, name v1.ResourceName) int64 {
		q, ok := l[name]
		if !ok {
			return 0
		}
		if name == v1.ResourceCPU {
			return q.MilliValue()
		}
		return q.Value()
	}
	names := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage}
	var rest []string
	for name := range req {
		switch name {
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, v1.ResourcePods:
			continue
		}
		if _, known := alloc[name]; !known && isExtended(name) {
			continue // the device manager's business
		}
		rest = append(rest, string(name))
	}
	sort.Strings(rest)
	for _, n := range rest {
		names = append(names, v1.ResourceName(n))
	}
	for _, name := range names {
		r := value(req, name)
		if r <= 0 {
			continue
		}
		capacity, u := value(alloc, name), value(used, name)
		if r > capacity-u {
			return &insufficient{name: name, requested: r, used: u, capacity: capacity}
		}
	}
	return nil
}

// isExtended reports whether name is an extended resource
// (example.com/gpu), as opposed to a native one.
func isExtended(name v1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/") && !strings.HasPrefix(s, "requests.")
}
