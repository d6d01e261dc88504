package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/podspec"
)

// staticPod is a pod as the file source reads it: no creation time.
func staticPod(uid, name string) *v1.Pod {
	p := filePod(uid, name, v1.RestartPolicyAlways, "app")
	p.CreationTimestamp = metav1.Time{}
	return p
}

func listed(t *testing.T, h *harness, name string) v1.Pod {
	t.Helper()
	for _, p := range h.pods.List() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("pod %s not listed", name)
	return v1.Pod{}
}

// TestCreationAndStartTimeSurviveReread: a static pod's manifest read
// again (any edit that leaves the pod's UID, or a touch) keeps the creation
// time the agent gave it and its status.startTime, so AGE goes on counting;
// the start latency is reported once, from when the pod was first seen.
func TestCreationAndStartTimeSurviveReread(t *testing.T) {
	h := newHarness(t)
	h.clk.Step(3 * time.Second)
	h.snapshot(podspec.SourceFile, staticPod("u1", "web"))
	first := listed(t, h, "web")
	if first.CreationTimestamp.IsZero() || first.Status.StartTime == nil {
		t.Fatalf("new pod: creation %v, start %v", first.CreationTimestamp, first.Status.StartTime)
	}

	h.clk.Step(time.Minute)
	again := staticPod("u1", "web")
	again.Annotations["kubernetes.io/config.hash"] = "re-read"
	h.snapshot(podspec.SourceFile, again)
	got := listed(t, h, "web")
	if !got.CreationTimestamp.Equal(&first.CreationTimestamp) {
		t.Fatalf("creation time after a re-read = %v, want %v (AGE would show <unknown>)", got.CreationTimestamp, first.CreationTimestamp)
	}
	if got.Status.StartTime == nil || !got.Status.StartTime.Equal(first.Status.StartTime) {
		t.Fatalf("startTime after a re-read = %v, want %v", got.Status.StartTime, first.Status.StartTime)
	}
	if len(h.metrics.starts) != 1 || h.metrics.starts[0] < 0 || h.metrics.starts[0] > time.Second {
		t.Fatalf("start latencies = %v, want one, from when the pod was seen", h.metrics.starts)
	}
}

// TestStartLatencyFromFirstSeen: the latency runs from when the agent saw
// the pod, not from a creation time set elsewhere (an API server's clock,
// long before), and a pod adopted after a restart reports none.
func TestStartLatencyFromFirstSeen(t *testing.T) {
	h := newHarness(t)
	h.clk.Step(time.Hour) // the pod was created an hour before the agent saw it
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod)
	if len(h.metrics.starts) != 1 || h.metrics.starts[0] != 0 {
		t.Fatalf("start latencies = %v, want [0s]", h.metrics.starts)
	}

	h.clk.Step(10 * time.Minute)
	h2 := newHarness(t, restartedFrom(h))
	h2.snapshot(podspec.SourceFile, staticPod("u1", "web"))
	if len(h2.metrics.starts) != 0 {
		t.Fatalf("an adopted pod reported start latencies %v", h2.metrics.starts)
	}
	// Its age counts from its saved start, not from the restart.
	if got := listed(t, h2, "web"); !got.CreationTimestamp.Time.Equal(t0.Add(time.Hour)) {
		t.Fatalf("creation time after a restart = %v, want the saved start %v", got.CreationTimestamp, t0.Add(time.Hour))
	}
}
