package eviction

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const mi = 1 << 20

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func hard(sig Signal, v string) Threshold {
	return Threshold{Signal: sig, Value: ThresholdValue{Quantity: qty(v)}}
}

func hardPct(sig Signal, p float64) Threshold {
	return Threshold{Signal: sig, Value: ThresholdValue{Percentage: p}}
}

func signals(ths []Threshold) []Signal {
	out := []Signal{}
	for _, th := range ths {
		out = append(out, th.Signal)
	}
	return out
}

func TestThresholdsMet(t *testing.T) {
	withReclaim := hard(SignalMemoryAvailable, "100Mi")
	withReclaim.MinReclaim = &ThresholdValue{Quantity: qty("50Mi")}
	cases := []struct {
		name       string
		ths        []Threshold
		obs        Observations
		minReclaim bool
		want       []Signal
	}{
		{"memory below quantity", []Threshold{hard(SignalMemoryAvailable, "100Mi")},
			Observations{SignalMemoryAvailable: {Available: 50 * mi, Capacity: 1024 * mi}}, false,
			[]Signal{SignalMemoryAvailable}},
		{"exactly at the threshold is not below it", []Threshold{hard(SignalMemoryAvailable, "100Mi")},
			Observations{SignalMemoryAvailable: {Available: 100 * mi, Capacity: 1024 * mi}}, false, []Signal{}},
		{"percentage of capacity", []Threshold{hardPct(SignalNodeFsAvailable, 0.1), hardPct(SignalNodeFsInodesFree, 0.05)},
			Observations{SignalNodeFsAvailable: {Available: 99, Capacity: 1000}, SignalNodeFsInodesFree: {Available: 50, Capacity: 1000}}, false,
			[]Signal{SignalNodeFsAvailable}},
		{"unmeasured signals are never met", []Threshold{hardPct(SignalImageFsAvailable, 0.15)},
			Observations{}, false, []Signal{}},
		{"min reclaim keeps a threshold met above its value", []Threshold{withReclaim},
			Observations{SignalMemoryAvailable: {Available: 120 * mi, Capacity: 1024 * mi}}, true,
			[]Signal{SignalMemoryAvailable}},
		{"until the value plus min reclaim", []Threshold{withReclaim},
			Observations{SignalMemoryAvailable: {Available: 150 * mi, Capacity: 1024 * mi}}, true, []Signal{}},
		{"min reclaim is ignored for new thresholds", []Threshold{withReclaim},
			Observations{SignalMemoryAvailable: {Available: 120 * mi, Capacity: 1024 * mi}}, false, []Signal{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := signals(thresholdsMet(tc.ths, tc.obs, tc.minReclaim)); !slices.Equal(got, tc.want) {
				t.Fatalf("met = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGracePeriodAndConditions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	soft := hard(SignalMemoryAvailable, "500Mi")
	soft.GracePeriod = time.Minute
	h := hardPct(SignalNodeFsAvailable, 0.1)
	met := []Threshold{soft, h}

	first := firstObserved(met, nil, t0)
	if got := signals(gracePeriodMet(met, first, t0)); !slices.Equal(got, []Signal{SignalNodeFsAvailable}) {
		t.Fatalf("at first sight = %v, want only the hard threshold", got)
	}
	first = firstObserved(met, first, t0.Add(30*time.Second))
	if got := signals(gracePeriodMet(met, first, t0.Add(59*time.Second))); len(got) != 1 {
		t.Fatalf("before the grace period = %v", got)
	}
	if got := signals(gracePeriodMet(met, first, t0.Add(time.Minute))); len(got) != 2 {
		t.Fatalf("after the grace period = %v, want both", got)
	}
	// A soft threshold that stops being met starts its grace over.
	first = firstObserved([]Threshold{h}, first, t0.Add(2*time.Minute))
	first = firstObserved(met, first, t0.Add(3*time.Minute))
	if got := signals(gracePeriodMet(met, first, t0.Add(3*time.Minute+30*time.Second))); len(got) != 1 {
		t.Fatalf("grace restarted: %v", got)
	}

	// Conditions: raised while met (soft ones even during their grace
	// period) and kept for the transition period after the last sighting.
	last := conditionsObserved([]Threshold{soft}, nil, t0)
	last = conditionsObserved([]Threshold{h, hard(SignalPIDAvailable, "100")}, last, t0.Add(4*time.Minute))
	want := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}
	if got := activeConditions(last, 5*time.Minute, t0.Add(4*time.Minute+59*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("conditions = %v, want %v", got, want)
	}
	if got := activeConditions(last, 5*time.Minute, t0.Add(5*time.Minute)); !slices.Equal(got, want[1:]) {
		t.Fatalf("memory pressure outlived its transition period: %v", got)
	}
}

func TestSortByEvictionPriority(t *testing.T) {
	ths := []Threshold{
		hard(SignalPIDAvailable, "100"), hardPct(SignalNodeFsInodesFree, 0.05),
		hardPct(SignalImageFsAvailable, 0.15), hard(SignalMemoryAvailable, "100Mi"),
	}
	sortByEvictionPriority(ths)
	want := []Signal{SignalMemoryAvailable, SignalImageFsAvailable, SignalNodeFsInodesFree, SignalPIDAvailable}
	if got := signals(ths); !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

func TestEvictionMessage(t *testing.T) {
	pod := mkPod("web", 0, "100Mi")
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "side"})
	obs := Observations{SignalMemoryAvailable: {Available: 50 * mi, Capacity: 1024 * mi},
		SignalNodeFsAvailable: {Available: 900 * mi, Capacity: 10240 * mi}}
	u := PodUsage{Memory: 300 * mi, Containers: map[string]int64{"app": 200 * mi, "side": 100 * mi}}
	got := evictionMessage(hard(SignalMemoryAvailable, "100Mi"), obs, pod, u, true)
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
		"Container app was using 200Mi, request is 100Mi, has larger consumption of memory. " +
		"Container side was using 100Mi, request is 0, has larger consumption of memory. "
	if got != want {
		t.Fatalf("message:\n%q\nwant\n%q", got, want)
	}
	got = evictionMessage(hardPct(SignalNodeFsAvailable, 0.1), obs, pod, u, true)
	if want := "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 900Mi. "; got != want {
		t.Fatalf("disk message %q, want %q", got, want)
	}
}
