package nodeshutdown

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
)

// systemCriticalPriority is the priority from which a pod counts as
// critical (scheduling.SystemCriticalPriority).
const systemCriticalPriority = 2_000_000_000

// PriorityPeriod is one entry of shutdownGracePeriodByPodPriority: pods of
// at least Priority (and below the next entry's) have Period to stop.
type PriorityPeriod struct {
	Priority int32
	Period   time.Duration
}

// group is the pods that stop together, within period.
type group struct {
	PriorityPeriod
	pods []*v1.Pod
}

// periods turns the configuration into priority groups, as the kubelet
// does: shutdownGracePeriodByPodPriority when given; otherwise regular pods
// get shutdownGracePeriod minus shutdownGracePeriodCriticalPods, and
// critical pods the latter. Sorted by priority, lowest first.
func periods(total, critical time.Duration, byPriority []PriorityPeriod) []PriorityPeriod {
	out := append([]PriorityPeriod{}, byPriority...)
	if len(out) == 0 {
		out = []PriorityPeriod{
			{Priority: 0, Period: total - critical},
			{Priority: systemCriticalPriority, Period: critical},
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Priority < out[j].Priority })
	return out
}

// groupPods puts each pod in the group of the highest priority not above
// its own (the lowest group for pods below them all). Groups keep the
// order of ps: lowest priority, first to stop.
func groupPods(pods []*v1.Pod, ps []PriorityPeriod) []group {
	groups := make([]group, len(ps))
	for i, p := range ps {
		groups[i].PriorityPeriod = p
	}
	for _, pod := range pods {
		prio := int32(0)
		if pod.Spec.Priority != nil {
			prio = *pod.Spec.Priority
		}
		i := sort.Search(len(groups), func(i int) bool { return groups[i].Priority > prio }) - 1
		if i < 0 {
			i = 0
		}
		groups[i].pods = append(groups[i].pods, pod)
	}
	return groups
}

// gracePeriod is the pod's own terminationGracePeriodSeconds when it fits
// in the group's period, else the period.
func gracePeriod(pod *v1.Pod, period time.Duration) int64 {
	limit := int64(period / time.Second)
	if own := pod.Spec.TerminationGracePeriodSeconds; own != nil && *own <= limit {
		return *own
	}
	return limit
}
