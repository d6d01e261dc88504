package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
)

// TestLivenessRestartsBackOff: restarts caused by a failing liveness probe
// back off like any crash, as the kubelet's do: the first two kills restart
// at once (no earlier attempt has exited yet when the first is killed),
// then the container waits in CrashLoopBackOff 10 s, 20 s, 40 s, with a
// BackOff event, before it is started again.
func TestLivenessRestartsBackOff(t *testing.T) {
	h := newHarness(t)
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod)
	failLiveness := func() {
		t.Helper()
		cur := h.rt.pod(pod.UID).FindContainer("app")
		if cur == nil || cur.State != container.StateRunning {
			t.Fatalf("app is not running: %+v", cur)
		}
		h.prober.livenessFailed[cur.ID] = true
		h.event(pod)
	}

	for kill := 1; kill <= 2; kill++ {
		h.clk.Step(6 * time.Second)
		failLiveness()
		if got := h.rt.attempts(pod.UID, "app"); got != kill+1 {
			t.Fatalf("kill %d: %d attempts, want %d (restarted at once)", kill, got, kill+1)
		}
	}
	for _, delay := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
		h.clk.Step(6 * time.Second)
		n := h.rt.attempts(pod.UID, "app")
		failLiveness()
		if h.rt.attempts(pod.UID, "app") != n {
			t.Fatalf("restarted at once after a liveness kill; want a %s back-off", delay)
		}
		if h.rt.pod(pod.UID).FindContainer("app").State == container.StateRunning {
			t.Fatal("the container that failed liveness was not killed")
		}
		if got := h.waiting(pod, "app"); got != ReasonCrashLoopBackOff {
			t.Fatalf("waiting reason = %q, want CrashLoopBackOff", got)
		}
		// Follow the worker's requeues: the restart comes delay after the
		// kill (the back-off counts from the newest exit), not before.
		waited := time.Duration(0)
		for h.rt.attempts(pod.UID, "app") == n {
			req := h.workers.workers[pod.UID].requeue
			if req <= 0 || waited+req > delay {
				t.Fatalf("after %s of a %s back-off: requeue %s", waited, delay, req)
			}
			if h.waiting(pod, "app") != ReasonCrashLoopBackOff {
				t.Fatalf("after %s: waiting %q, want CrashLoopBackOff", waited, h.waiting(pod, "app"))
			}
			h.clk.Step(req)
			waited += req
			h.event(pod)
		}
		if waited != delay || h.waiting(pod, "app") != "" {
			t.Fatalf("restarted %s after the kill (waiting %q), want %s", waited, h.waiting(pod, "app"), delay)
		}
	}
	if !h.rec.Has("Warning BackOff Back-off restarting failed container app in pod web_default(u1)") {
		t.Errorf("no BackOff event: %v", h.rec.Events())
	}
	if got := h.status(pod).ContainerStatuses[0].RestartCount; got != 5 {
		t.Errorf("restartCount = %d, want 5", got)
	}
}
