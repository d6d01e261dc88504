package eviction

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Observation is one signal's measurement: what is available and out of
// how much. Units: bytes for memory and filesystems, inodes, process IDs.
type Observation struct {
	Available int64
	Capacity  int64
}

// Observations are the node's signals at one moment; a signal the stats
// source cannot measure is absent, and thresholds on it are never met.
type Observations map[Signal]Observation

// resourceInodes is the pseudo-resource the kubelet names inode pressure
// by; resourcePIDs likewise for pid.available.
const (
	resourceInodes v1.ResourceName = "inodes"
	resourcePIDs   v1.ResourceName = "pids"
)

// signalResource is the resource each signal is about, as the kubelet
// names it in eviction messages.
var signalResource = map[Signal]v1.ResourceName{
	SignalMemoryAvailable:            v1.ResourceMemory,
	SignalAllocatableMemoryAvailable: v1.ResourceMemory,
	SignalNodeFsAvailable:            v1.ResourceEphemeralStorage,
	SignalNodeFsInodesFree:           resourceInodes,
	SignalImageFsAvailable:           v1.ResourceEphemeralStorage,
	SignalImageFsInodesFree:          resourceInodes,
	SignalContainerFsAvailable:       v1.ResourceEphemeralStorage,
	SignalContainerFsInodesFree:      resourceInodes,
	SignalPIDAvailable:               resourcePIDs,
}

// signalCondition is the node condition a met threshold on the signal
// raises.
var signalCondition = map[Signal]v1.NodeConditionType{
	SignalMemoryAvailable:            v1.NodeMemoryPressure,
	SignalAllocatableMemoryAvailable: v1.NodeMemoryPressure,
	SignalNodeFsAvailable:            v1.NodeDiskPressure,
	SignalNodeFsInodesFree:           v1.NodeDiskPressure,
	SignalImageFsAvailable:           v1.NodeDiskPressure,
	SignalImageFsInodesFree:          v1.NodeDiskPressure,
	SignalContainerFsAvailable:       v1.NodeDiskPressure,
	SignalContainerFsInodesFree:      v1.NodeDiskPressure,
	SignalPIDAvailable:               v1.NodePIDPressure,
}

// quantity is a threshold value (absolute, or a share of capacity) in
// the signal's unit.
func quantity(v ThresholdValue, capacity int64) int64 {
	if v.Quantity != nil {
		return v.Quantity.Value()
	}
	return int64(v.Percentage * float64(capacity))
}

// formatQuantity formats a threshold's value like the kubelet's
// messages (binary units for bytes, plain numbers otherwise).
func formatQuantity(sig Signal, n int64) string {
	if signalResource[sig] == v1.ResourceMemory || signalResource[sig] == v1.ResourceEphemeralStorage {
		return resource.NewQuantity(n, resource.BinarySI).String()
	}
	return resource.NewQuantity(n, resource.DecimalSI).String()
}

// thresholdsMet returns the thresholds whose signal is below their value.
// With minReclaim, a threshold stays met until the signal is above its
// value plus its minimum reclaim, so a node that just crossed back does
// not flap.
func thresholdsMet(ths []Threshold, obs Observations, minReclaim bool) []Threshold {
	var out []Threshold
	for _, th := range ths {
		o, ok := obs[th.Signal]
		if !ok {
			continue
		}
		want := quantity(th.Value, o.Capacity)
		if minReclaim && th.MinReclaim != nil {
			want += quantity(*th.MinReclaim, o.Capacity)
		}
		if o.Available < want {
			out = append(out, th)
		}
	}
	return out
}

// thresholdKey identifies a threshold (hard and soft ones on the same
// signal are different thresholds).
type thresholdKey struct {
	signal Signal
	soft   bool
}

func keyOf(th Threshold) thresholdKey {
	return thresholdKey{signal: th.Signal, soft: th.GracePeriod > 0}
}

// mergeThresholds joins two lists without duplicates, keeping order.
func mergeThresholds(a, b []Threshold) []Threshold {
	out := slices.Clone(a)
	for _, th := range b {
		if !slices.ContainsFunc(out, func(o Threshold) bool { return keyOf(o) == keyOf(th) }) {
			out = append(out, th)
		}
	}
	return out
}

// firstObserved carries forward when each met threshold was first seen
// met; thresholds no longer met are dropped.
func firstObserved(met []Threshold, prev map[thresholdKey]time.Time, now time.Time) map[thresholdKey]time.Time {
	out := make(map[thresholdKey]time.Time, len(met))
	for _, th := range met {
		k := keyOf(th)
		if t, ok := prev[k]; ok {
			out[k] = t
		} else {
			out[k] = now
		}
	}
	return out
}

// gracePeriodMet keeps the thresholds that have been met for at least
// their grace period (hard thresholds have none).
func gracePeriodMet(met []Threshold, since map[thresholdKey]time.Time, now time.Time) []Threshold {
	var out []Threshold
	for _, th := range met {
		if t, ok := since[keyOf(th)]; ok && now.Sub(t) >= th.GracePeriod {
			out = append(out, th)
		}
	}
	return out
}

// conditionsObserved records now as the last time each condition of the
// met thresholds was observed.
func conditionsObserved(met []Threshold, last map[v1.NodeConditionType]time.Time, now time.Time) map[v1.NodeConditionType]time.Time {
	out := make(map[v1.NodeConditionType]time.Time, len(last)+len(met))
	for c, t := range last {
		out[c] = t
	}
	for _, th := range met {
		if c, ok := signalCondition[th.Signal]; ok {
			out[c] = now
		}
	}
	return out
}

// activeConditions are those observed within the pressure transition
// period: a condition stays true that long after its last observation.
func activeConditions(last map[v1.NodeConditionType]time.Time, transition time.Duration, now time.Time) []v1.NodeConditionType {
	var out []v1.NodeConditionType
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		if t, ok := last[c]; ok && now.Sub(t) < transition {
			out = append(out, c)
		}
	}
	return out
}

// signalOrder ranks signals for reclaim: memory first, then disk, then
// process IDs (the kubelet reclaims memory before anything else).
func signalOrder(s Signal) int {
	switch signalResource[s] {
	case v1.ResourceMemory:
		return 0
	case v1.ResourceEphemeralStorage:
		return 1
	case resourceInodes:
		return 2
	}
	return 3
}

// sortByEvictionPriority orders met thresholds so the first is the one
// to reclaim for.
func sortByEvictionPriority(ths []Threshold) {
	slices.SortStableFunc(ths, func(a, b Threshold) int { return signalOrder(a.Signal) - signalOrder(b.Signal) })
}
