package eviction

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodUsage is what a pod uses, for ranking pods to evict.
type PodUsage struct {
	Memory     int64            // working set bytes
	Containers map[string]int64 // working set bytes per container (for the eviction message)
	Disk       int64            // ephemeral storage bytes: writable layers, logs, emptyDirs
	Inodes     int64
	Processes  int64
}

// podCompare compares two pods; negative means a is evicted first.
type podCompare func(a, b *v1.Pod) int

// rankPods sorts pods so the first is the one to evict for the signal,
// the way the kubelet ranks them. Pods without usage figures go first
// (their usage is unknown, as with the kubelet).
func rankPods(sig Signal, pods []*v1.Pod, usage map[types.UID]PodUsage) {
	var by []podCompare
	switch signalResource[sig] {
	case v1.ResourceMemory:
		// Usage above requests first, then lower priority, then most
		// usage above requests.
		get := func(u PodUsage) int64 { return u.Memory }
		by = []podCompare{exceedsRequests(usage, v1.ResourceMemory, get), byPriority, usageOverRequests(usage, v1.ResourceMemory, get)}
	case v1.ResourceEphemeralStorage:
		get := func(u PodUsage) int64 { return u.Disk }
		by = []podCompare{exceedsRequests(usage, v1.ResourceEphemeralStorage, get), byPriority, usageOverRequests(usage, v1.ResourceEphemeralStorage, get)}
	case resourceInodes:
		get := func(u PodUsage) int64 { return u.Inodes }
		by = []podCompare{exceedsRequests(usage, resourceInodes, get), byPriority, usageOverRequests(usage, resourceInodes, get)}
	default: // pids: lower priority, then most processes
		by = []podCompare{byPriority, func(a, b *v1.Pod) int {
			ua, oka := usage[a.UID]
			ub, okb := usage[b.UID]
			if c := unknownFirst(oka, okb); c != 0 || !oka {
				return c
			}
			return cmp.Compare(ub.Processes, ua.Processes)
		}}
	}
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
		for _, f := range by {
			if c := f(a, b); c != 0 {
				return c
			}
		}
		return 0
	})
}

// unknownFirst puts a pod without usage figures before one with them.
func unknownFirst(aKnown, bKnown bool) int {
	switch {
	case aKnown == bKnown:
		return 0
	case !aKnown:
		return -1
	}
	return 1
}

func exceedsRequests(usage map[types.UID]PodUsage, res v1.ResourceName, get func(PodUsage) int64) podCompare {
	return func(a, b *v1.Pod) int {
		ua, oka := usage[a.UID]
		ub, okb := usage[b.UID]
		if c := unknownFirst(oka, okb); c != 0 || !oka {
			return c
		}
		ea := get(ua) > podRequest(a, res)
		eb := get(ub) > podRequest(b, res)
		switch {
		case ea == eb:
			return 0
		case ea:
			return -1
		}
		return 1
	}
}

func usageOverRequests(usage map[types.UID]PodUsage, res v1.ResourceName, get func(PodUsage) int64) podCompare {
	return func(a, b *v1.Pod) int {
		ua, oka := usage[a.UID]
		ub, okb := usage[b.UID]
		if c := unknownFirst(oka, okb); c != 0 || !oka {
			return c
		}
		return cmp.Compare(get(ub)-podRequest(b, res), get(ua)-podRequest(a, res))
	}
}

// byPriority evicts lower-priority pods first.
func byPriority(a, b *v1.Pod) int { return cmp.Compare(priority(a), priority(b)) }

func priority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// podRequest is the pod's effective request of a resource: the larger
// of its containers' sum and any one init container's request.
func podRequest(p *v1.Pod, res v1.ResourceName) int64 {
	var sum int64
	for i := range p.Spec.Containers {
		if q, ok := p.Spec.Containers[i].Resources.Requests[res]; ok {
			sum += q.Value()
		}
	}
	for i := range p.Spec.InitContainers {
		if q, ok := p.Spec.InitContainers[i].Resources.Requests[res]; ok && q.Value() > sum {
			sum = q.Value()
		}
	}
	return sum
}

// systemCriticalPriority is the priority from which the kubelet treats
// a pod as critical and never evicts it.
const systemCriticalPriority = 2 * 1000000000

func isCritical(p *v1.Pod) bool { return priority(p) >= systemCriticalPriority }
