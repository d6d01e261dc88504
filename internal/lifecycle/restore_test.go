package lifecycle

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/podspec"
)

// TestListShowsSavedStatusBeforeFirstSync: right after a restart, a pod
// its source sent but no worker has synced yet is listed with the status
// the last run saved (Running, Ready), never as a bare Pending.
func TestListShowsSavedStatusBeforeFirstSync(t *testing.T) {
	h := newHarness(t)
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod)
	if st := h.status(pod); st.Phase != v1.PodRunning || condition(st, v1.PodReady) != v1.ConditionTrue {
		t.Fatalf("setup: phase %s, Ready %s", st.Phase, condition(st, v1.PodReady))
	}

	h2 := newHarness(t, restartedFrom(h))
	h2.pods.setDesired(pod) // the source spoke; the worker has not run yet
	got := listed(t, h2, "web")
	if got.Status.Phase != v1.PodRunning || condition(got.Status, v1.PodReady) != v1.ConditionTrue {
		t.Fatalf("first listing after a restart: phase %s, Ready %s; want the saved Running, True",
			got.Status.Phase, condition(got.Status, v1.PodReady))
	}
	// And the first sync keeps it so.
	h2.snapshot(podspec.SourceFile, pod)
	if st := h2.status(pod); st.Phase != v1.PodRunning || condition(st, v1.PodReady) != v1.ConditionTrue {
		t.Fatalf("after the first sync: phase %s, Ready %s", st.Phase, condition(st, v1.PodReady))
	}
}

// TestWaitForSources: the wait for the sources' first snapshots ends once
// every named source was handled, and not before.
func TestWaitForSources(t *testing.T) {
	h := newHarness(t, withSources(podspec.SourceFile, podspec.SourceHTTP))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.snapshot(podspec.SourceFile, filePod("u1", "web", v1.RestartPolicyAlways, "app"))
	if err := h.pods.WaitForSources(ctx, []string{podspec.SourceFile, podspec.SourceHTTP}); err == nil {
		t.Fatal("the wait ended before the HTTP source spoke")
	}
	h.snapshot(podspec.SourceHTTP)
	if err := h.pods.WaitForSources(ctx, []string{podspec.SourceFile, podspec.SourceHTTP}); err != nil {
		t.Fatalf("every source spoke, the wait still failed: %v", err)
	}
}
