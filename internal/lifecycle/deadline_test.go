package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/podspec"
)

// resync runs the pod's worker again, as its requeue timer would.
func (h *harness) resync(pod *v1.Pod) {
	h.t.Helper()
	h.workers.Resync(pod.UID)
	h.workers.step(h.t)
}

// TestActiveDeadline: a pod with activeDeadlineSeconds asks to be synced
// when its deadline comes, runs until then, and is then stopped with its
// grace period and ends Failed/DeadlineExceeded with a DeadlineExceeded
// event. Static pods get no exception.
func TestActiveDeadline(t *testing.T) {
	for _, pod := range []*v1.Pod{
		apiPod("u1", "job", "app"),
		filePod("u2", "static", v1.RestartPolicyAlways, "app"),
	} {
		t.Run(pod.Name, func(t *testing.T) {
			h := newHarness(t, withSources(podspec.SourceFile, "api"))
			deadline := int64(30)
			pod.Spec.ActiveDeadlineSeconds = &deadline
			h.snapshot(pod.Annotations[podspec.AnnotationConfigSource], pod)
			if st := h.status(pod); st.Phase != v1.PodRunning {
				t.Fatalf("phase = %s, want Running", st.Phase)
			}
			if got := h.workers.workers[pod.UID].requeue; got != 30*time.Second {
				t.Fatalf("requeue after start = %v, want the 30s to the deadline", got)
			}

			h.clk.Step(29 * time.Second)
			h.resync(pod)
			if st := h.status(pod); st.Phase != v1.PodRunning || len(h.rt.kills) != 0 {
				t.Fatalf("before the deadline: phase %s, kills %v", st.Phase, h.rt.kills)
			}
			if got := h.workers.workers[pod.UID].requeue; got != time.Second {
				t.Fatalf("requeue 1s before the deadline = %v, want 1s", got)
			}

			h.clk.Step(time.Second)
			h.resync(pod)
			st := h.status(pod)
			if st.Phase != v1.PodFailed || st.Reason != ReasonDeadlineExceeded || st.Message != MessageDeadlineExceeded {
				t.Fatalf("at the deadline: phase %s reason %q message %q", st.Phase, st.Reason, st.Message)
			}
			if len(h.rt.kills) != 1 || h.rt.kills[0].grace != nil {
				t.Fatalf("kills = %+v, want one with the pod's own grace period", h.rt.kills)
			}
			if cs := st.ContainerStatuses[0]; cs.State.Terminated == nil {
				t.Fatalf("container after the kill: %+v", cs.State)
			}
			if !h.rec.Has("Normal DeadlineExceeded " + MessageDeadlineExceeded) {
				t.Fatalf("no DeadlineExceeded event:\n%s", h.rec)
			}
			if got := h.publisher.statuses[pod.Name]; got.Phase != v1.PodFailed || got.Reason != ReasonDeadlineExceeded {
				t.Fatalf("published %s/%s", got.Phase, got.Reason)
			}
			if wk := h.workers.workers[pod.UID]; wk.phase.String() != "terminated" {
				t.Fatalf("worker phase = %s, want terminated", wk.phase)
			}
			// Nothing starts it again.
			h.event(pod)
			if n := h.rt.attempts(pod.UID, "app"); n != 1 {
				t.Fatalf("attempts = %d after the deadline, want 1", n)
			}
		})
	}
}

// TestActiveDeadlineCountsFromFirstStart: the deadline runs from the
// pod's startTime, which a restarted agent keeps; a pod past it when the
// agent comes back is stopped at its first sync. A pod without a
// deadline asks for no early sync.
func TestActiveDeadlineCountsFromFirstStart(t *testing.T) {
	h := newHarness(t)
	deadline := int64(60)
	pod := filePod("u1", "job", v1.RestartPolicyNever, "app")
	pod.Spec.ActiveDeadlineSeconds = &deadline
	plain := filePod("u2", "plain", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod, plain)
	if got := h.workers.workers[plain.UID].requeue; got != 0 {
		t.Fatalf("requeue of a pod without deadline = %v, want 0", got)
	}

	h.clk.Step(90 * time.Second) // the agent was down meanwhile
	h2 := newHarness(t, restartedFrom(h))
	h2.snapshot(podspec.SourceFile, pod, plain)
	if st := h2.status(pod); st.Phase != v1.PodFailed || st.Reason != ReasonDeadlineExceeded {
		t.Fatalf("after restart past the deadline: phase %s reason %q", st.Phase, st.Reason)
	}
	if st := h2.status(plain); st.Phase != v1.PodRunning {
		t.Fatalf("pod without deadline: phase %s", st.Phase)
	}
}
