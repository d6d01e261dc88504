package eviction

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/minilet/minilet/internal/config"
)

const mi = 1 << 20

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func hard(sig config.Signal, v string) config.Threshold {
	return config.Threshold{Signal: sig, Value: config.ThresholdValue{Quantity: qty(v)}}
}

func hardPct(sig config.Signal, p float64) config.Threshold {
	return config.Threshold{Signal: sig, Value: config.ThresholdValue{Percentage: p}}
}

func signals(ths []config.Threshold) []config.Signal {
	out := []config.Signal{}
	for _, th := range ths {
		out = append(out, th.Signal)
	}
	return out
}

func TestThresholdsMet(t *testing.T) {
	withReclaim := hard(config.SignalMemoryAvailable, "100Mi")
	withReclaim.MinReclaim = &config.ThresholdValue{Quantity: qty("50Mi")}
	cases := []struct {
		name       string
		ths        []config.Threshold
		obs        Observations
		minReclaim bool
		want       []config.Signal
	}{
		{"memory below quantity", []config.Threshold{hard(config.SignalMemoryAvailable, "100Mi")},
			Observations{config.SignalMemoryAvailable: {Available: 50 * mi, Capacity: 1024 * mi}}, false,
			[]config.Signal{config.SignalMemoryAvailable}},
		{"exactly at the threshold is not below it", []config.Threshold{hard(config.SignalMemoryAvailable, "100Mi")},
			Observations{config.SignalMemoryAvailable: {Available: 100 * mi, Capacity: 1024 * mi}}, false, []config.Signal{}},
		{"percentage of capacity", []config.Threshold{hardPct(config.SignalNodeFsAvailable, 0.1), hardPct(config.SignalNodeFsInodesFree, 0.05)},
			Observations{config.SignalNodeFsAvailable: {Available: 99, Capacity: 1000}, config.SignalNodeFsInodesFree: {Available: 50, Capacity: 1000}}, false,
			[]config.Signal{config.SignalNodeFsAvailable}},
		{"unmeasured signals are never met", []config.Threshold{hardPct(config.SignalImageFsAvailable, 0.15)},
			Observations{}, false, []config.Signal{}},
		{"min reclaim keeps a threshold met above its value", []config.Threshold{withReclaim},
			Observations{config.SignalMemoryAvailable: {Available: 120 * mi, Capacity: 1024 * mi}}, true,
			[]config.Signal{config.SignalMemoryAvailable}},
		{"until the value plus min reclaim", []config.Threshold{withReclaim},
			Observations{config.SignalMemoryAvailable: {Available: 150 * mi, Capacity: 1024 * mi}}, true, []config.Signal{}},
		{"min reclaim is ignored for new thresholds", []config.Threshold{withReclaim},
			Observations{config.SignalMemoryAvailable: {Available: 120 * mi, Capacity: 1024 * mi}}, false, []config.Signal{}},
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
	soft := hard(config.SignalMemoryAvailable, "500Mi")
	soft.GracePeriod = time.Minute
	h := hardPct(config.SignalNodeFsAvailable, 0.1)
	met := []config.Threshold{soft, h}

	first := firstObserved(met, nil, t0)
	if got := signals(gracePeriodMet(met, first, t0)); !slices.Equal(got, []config.Signal{config.SignalNodeFsAvailable}) {
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
	first = firstObserved([]config.Threshold{h}, first, t0.Add(2*time.Minute))
	first = firstObserved(met, first, t0.Add(3*time.Minute))
	if got := signals(gracePeriodMet(met, first, t0.Add(3*time.Minute+30*time.Second))); len(got) != 1 {
		t.Fatalf("grace restarted: %v", got)
	}

	// Conditions: raised while met (soft ones even during their grace
	// period) and kept for the transition period after the last sighting.
	last := conditionsObserved([]config.Threshold{soft}, nil, t0)
	last = conditionsObserved([]config.Threshold{h, hard(config.SignalPIDAvailable, "100")}, last, t0.Add(4*time.Minute))
	want := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}
	if got := activeConditions(last, 5*time.Minute, t0.Add(4*time.Minute+59*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("conditions = %v, want %v", got, want)
	}
	if got := activeConditions(last, 5*time.Minute, t0.Add(5*time.Minute)); !slices.Equal(got, want[1:]) {
		t.Fatalf("memory pressure outlived its transition period: %v", got)
	}
}

func TestSortByEvictionPriority(t *testing.T) {
	ths := []config.Threshold{
		hard(config.SignalPIDAvailable, "100"), hardPct(config.SignalNodeFsInodesFree, 0.05),
		hardPct(config.SignalImageFsAvailable, 0.15), hard(config.SignalMemoryAvailable, "100Mi"),
	}
	sortByEvictionPriority(ths)
	want := []config.Signal{config.SignalMemoryAvailable, config.SignalImageFsAvailable, config.SignalNodeFsInodesFree, config.SignalPIDAvailable}
	if got := signals(ths); !slices.Equal(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

func TestEvictionMessage(t *testing.T) {
	pod := mkPod("web", 0, "100Mi")
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "side"})
	obs := Observations{config.SignalMemoryAvailable: {Available: 50 * mi, Capacity: 1024 * mi},
		config.SignalNodeFsAvailable: {Available: 900 * mi, Capacity: 10240 * mi}}
	u := PodUsage{Memory: 300 * mi, Containers: map[string]int64{"app": 200 * mi, "side": 100 * mi}}
	got := evictionMessage(hard(config.SignalMemoryAvailable, "100Mi"), obs, pod, u, true)
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
		"Container app was using 200Mi, request is 100Mi, has larger consumption of memory. " +
		"Container side was using 100Mi, request is 0, has larger consumption of memory. "
	if got != want {
		t.Fatalf("message:\n%q\nwant\n%q", got, want)
	}
	got = evictionMessage(hardPct(config.SignalNodeFsAvailable, 0.1), obs, pod, u, true)
	if want := "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 900Mi. "; got != want {
		t.Fatalf("disk message %q, want %q", got, want)
	}
}
