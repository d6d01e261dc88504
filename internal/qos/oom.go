package qos

import (
	"github.com/minilet/minilet/internal/podspec"
	v1 "k8s.io/api/core/v1"
)

// OOM score adjustments of the kubelet's policy.
const (
	// GuaranteedOOMScoreAdj protects Guaranteed and node-critical pods.
	GuaranteedOOMScoreAdj = -997
	// BestEffortOOMScoreAdj makes BestEffort pods the first to be killed.
	BestEffortOOMScoreAdj = 1000
)

// ContainerOOMScoreAdj returns the oom_score_adj for container c of pod on
// a node with memoryCapacity bytes: -997 for Guaranteed and node-critical
// pods, 1000 for BestEffort, and for Burstable 1000 - 1000*request/capacity
// kept within [3, 999], so Burstable always sits between the other two.
// A sidecar (restartable init container) gets no higher a score than the
// app container with the smallest memory request.
func ContainerOOMScoreAdj(pod *v1.Pod, c *v1.Container, memoryCapacity int64) int {
	if IsNodeCritical(pod) {
		return GuaranteedOOMScoreAdj
	}
	switch PodQOSClass(pod) {
	case v1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return BestEffortOOMScoreAdj - 1
	}
	adj := burstableAdj(MemoryBytes(c.Resources.Requests), memoryCapacity)
	if isSidecar(pod, c) && len(pod.Spec.Containers) > 0 {
		minReq := MemoryBytes(pod.Spec.Containers[0].Resources.Requests)
		for i := range pod.Spec.Containers[1:] {
			minReq = min(minReq, MemoryBytes(pod.Spec.Containers[i+1].Resources.Requests))
		}
		adj = min(adj, burstableAdj(minReq, memoryCapacity))
	}
	switch {
	case adj < 1000+GuaranteedOOMScoreAdj:
		return 1000 + GuaranteedOOMScoreAdj
	case adj >= BestEffortOOMScoreAdj:
		return BestEffortOOMScoreAdj - 1
	}
	return int(adj)
}

func burstableAdj(request, capacity int64) int64 {
	return 1000 - (1000*request)/capacity
}

func isSidecar(pod *v1.Pod, c *v1.Container) bool {
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		if ic.Name == c.Name {
			return podspec.IsSidecar(ic)
		}
	}
	return false
}
