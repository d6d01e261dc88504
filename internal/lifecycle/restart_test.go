package lifecycle

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/podspec"
)

// TestRestartMatrix walks one container through exits under each restart
// policy and exit code, as a user watching `get pods` would see it: when it
// is restarted, when it waits in CrashLoopBackOff (10 s, then 20 s, 40 s,
// measured from when it exited), and the phase the pod ends in.
func TestRestartMatrix(t *testing.T) {
	always, onFailure, never := v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever
	for _, tc := range []struct {
		policy    v1.RestartPolicy
		exit      int32
		restarted bool
		phase     v1.PodPhase // after the first exit
	}{
		{always, 0, true, v1.PodRunning},
		{always, 1, true, v1.PodRunning},
		{always, 137, true, v1.PodRunning},
		{onFailure, 0, false, v1.PodSucceeded},
		{onFailure, 1, true, v1.PodRunning},
		{onFailure, 137, true, v1.PodRunning},
		{never, 0, false, v1.PodSucceeded},
		{never, 1, false, v1.PodFailed},
		{never, 137, false, v1.PodFailed},
	} {
		t.Run(fmt.Sprintf("%s/exit%d", tc.policy, tc.exit), func(t *testing.T) {
			h := newHarness(t)
			pod := filePod("u1", "web", tc.policy, "app")
			h.snapshot(podspec.SourceFile, pod)
			if got := h.status(pod).Phase; got != v1.PodRunning {
				t.Fatalf("phase after start = %s, want Running", got)
			}

			// The first exit restarts at once, or never.
			h.rt.exit(t, pod.UID, "app", tc.exit)
			h.event(pod)
			st := h.status(pod)
			if got := h.rt.attempts(pod.UID, "app") == 2; got != tc.restarted {
				t.Fatalf("restarted = %v, want %v", got, tc.restarted)
			}
			if st.Phase != tc.phase {
				t.Fatalf("phase = %s, want %s", st.Phase, tc.phase)
			}
			if !tc.restarted {
				// A terminal pod stops being synced and is torn down.
				if wk := h.workers.workers[pod.UID]; wk.phase.String() != "terminated" {
					t.Fatalf("worker phase = %s, want terminated", wk.phase)
				}
				if len(h.cgroups.removed) != 1 {
					t.Fatalf("cgroup of a finished pod not removed: %v", h.cgroups.removed)
				}
				return
			}
			if cs := st.ContainerStatuses[0]; cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil ||
				cs.LastTerminationState.Terminated.ExitCode != tc.exit {
				t.Fatalf("container status after restart = %+v", cs)
			}

			// Later exits wait out a doubling back-off.
			for _, delay := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
				h.rt.exit(t, pod.UID, "app", tc.exit)
				n := h.rt.attempts(pod.UID, "app")
				h.event(pod)
				if got := h.waiting(pod, "app"); got != ReasonCrashLoopBackOff {
					t.Fatalf("waiting reason = %q, want CrashLoopBackOff (back-off %s)", got, delay)
				}
				if wk := h.workers.workers[pod.UID]; wk.requeue != delay {
					t.Fatalf("requeue after %s, want the back-off %s", wk.requeue, delay)
				}
				if h.status(pod).Phase != v1.PodRunning {
					t.Fatalf("a crash-looping pod is %s, want Running", h.status(pod).Phase)
				}
				h.clk.Step(delay - time.Second)
				h.event(pod)
				if h.rt.attempts(pod.UID, "app") != n {
					t.Fatalf("restarted %s before its %s back-off ended", delay-time.Second, delay)
				}
				h.clk.Step(time.Second)
				h.event(pod)
				if h.rt.attempts(pod.UID, "app") != n+1 || h.waiting(pod, "app") != "" {
					t.Fatalf("not restarted once its %s back-off ended", delay)
				}
			}
			if !h.rec.Has("Warning BackOff Back-off restarting failed container app in pod web_default(u1)") {
				t.Errorf("no BackOff event: %v", h.rec.Events())
			}
		})
	}
}

// TestBackoffStartsOverAfterALongRun: a container that ran for more than
// ten minutes (twice the maximum back-off) before it crashed again is
// restarted at once, as the kubelet does.
func TestBackoffStartsOverAfterALongRun(t *testing.T) {
	h := newHarness(t)
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod)
	h.rt.exit(t, pod.UID, "app", 1)
	h.event(pod) // first restart: at once
	h.rt.exit(t, pod.UID, "app", 1)
	h.event(pod) // second: 10 s back-off
	h.clk.Step(10 * time.Second)
	h.event(pod)
	if h.rt.attempts(pod.UID, "app") != 3 {
		t.Fatal("setup: third attempt did not start")
	}
	h.clk.Step(11 * time.Minute)
	h.rt.exit(t, pod.UID, "app", 1)
	h.event(pod)
	if h.rt.attempts(pod.UID, "app") != 4 || h.waiting(pod, "app") != "" {
		t.Fatalf("after a long run the crash waited (%q): want an immediate restart", h.waiting(pod, "app"))
	}
}

// TestChangedSpecRestartsWithoutBackoff: editing a container's spec kills
// it with the kubelet's message and starts the new spec at once, even
// while the old one was crash-looping.
func TestChangedSpecRestartsWithoutBackoff(t *testing.T) {
	h := newHarness(t)
	pod := filePod("u1", "web", v1.RestartPolicyAlways, "app")
	h.snapshot(podspec.SourceFile, pod)
	old := h.rt.pod(pod.UID).FindContainer("app").ID

	edited := pod.DeepCopy()
	edited.Spec.Containers[0].Env = []v1.EnvVar{{Name: "X", Value: "2"}}
	edited.Annotations["edit"] = "1" // a new manifest: the source's annotations change
	h.snapshot(podspec.SourceFile, edited)
	cur := h.rt.pod(pod.UID).FindContainer("app")
	if cur.ID == old || h.rt.attempts(pod.UID, "app") != 2 {
		t.Fatalf("container not replaced: %+v", cur)
	}
	kills := h.rt.actions[len(h.rt.actions)-1].ContainersToKill
	if len(kills) != 1 || kills[0].Message != "Container app definition changed, will be restarted" {
		t.Fatalf("kill = %+v", kills)
	}
}

// TestLivenessFailureRestartsUnlessNever: a failed liveness probe kills
// the container; it is started again unless the pod never restarts.
func TestLivenessFailureRestartsUnlessNever(t *testing.T) {
	for _, policy := range []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyNever} {
		t.Run(string(policy), func(t *testing.T) {
			h := newHarness(t)
			pod := filePod("u1", "web", policy, "app")
			h.snapshot(podspec.SourceFile, pod)
			h.prober.livenessFailed[h.rt.pod(pod.UID).FindContainer("app").ID] = true
			h.event(pod)
			acts := h.rt.actions[len(h.rt.actions)-1]
			if policy == v1.RestartPolicyNever {
				if !acts.KillPod || h.status(pod).Phase != v1.PodFailed {
					t.Fatalf("never pod: actions %+v phase %s, want the pod killed and Failed", acts, h.status(pod).Phase)
				}
				return
			}
			if len(acts.ContainersToKill) != 1 || acts.ContainersToKill[0].Reason != "liveness" ||
				acts.ContainersToKill[0].Message != "Container app failed liveness probe, will be restarted" {
				t.Fatalf("kill = %+v", acts.ContainersToKill)
			}
			if h.rt.attempts(pod.UID, "app") != 2 {
				t.Fatalf("not restarted")
			}
		})
	}
}
