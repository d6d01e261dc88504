package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// restartAllOn42 is a restart rule that restarts the whole pod when the
// container exits 42.
func restartAllOn42(c v1.Container) v1.Container {
	never := v1.ContainerRestartPolicyNever
	c.RestartPolicy = &never
	c.RestartPolicyRules = []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	return c
}

func TestRestartAllContainersStartsThePodOverInPlace(t *testing.T) {
	h := newHarness(t, withSources("api"))
	pod := withInit(apiPod("uid-ra", "web", "src", "other"), sidecar("side"), v1.Container{Name: "init", Image: "host"})
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Containers[0] = restartAllOn42(pod.Spec.Containers[0])
	step := func() { h.clk.Step(time.Second) }

	h.snapshot("api", pod) // the sidecar
	step()
	h.event(pod) // init
	step()
	h.rt.exit(t, pod.UID, "init", 0)
	h.event(pod) // the app containers
	if h.rt.attempts(pod.UID, "src") != 1 || h.rt.attempts(pod.UID, "other") != 1 {
		t.Fatalf("app containers did not start: src %d, other %d", h.rt.attempts(pod.UID, "src"), h.rt.attempts(pod.UID, "other"))
	}
	step()

	h.rt.exit(t, pod.UID, "src", 42)
	h.event(pod)
	if got := h.status(pod).Phase; got == v1.PodFailed || got == v1.PodSucceeded {
		t.Fatalf("phase %s after an exit that restarts all containers", got)
	}
	if h.rt.attempts(pod.UID, "side") != 2 {
		t.Fatalf("the sidecar was not started over (%d attempts)", h.rt.attempts(pod.UID, "side"))
	}
	if st := h.rt.pod(pod.UID).FindContainer("other"); st.State == "running" {
		t.Errorf("other still runs: %+v", st)
	}
	step()
	h.event(pod) // init again, in order
	step()
	h.rt.exit(t, pod.UID, "init", 0)
	h.event(pod)
	for name, want := range map[string]int{"side": 2, "init": 2, "src": 2, "other": 2} {
		if got := h.rt.attempts(pod.UID, name); got != want {
			t.Errorf("%s: %d attempts, want %d", name, got, want)
		}
	}
	st := h.status(pod)
	if st.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", st.Phase)
	}
	for _, cs := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
		if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil {
			t.Errorf("%s: restartCount %d, lastTerminationState %+v; want 1 and the attempt before", cs.Name, cs.RestartCount, cs.LastTerminationState)
		}
	}

	// src runs again and the pod does not loop: only a new exit 42 restarts it all.
	step()
	h.event(pod)
	if got := h.rt.attempts(pod.UID, "other"); got != 2 {
		t.Errorf("other restarted again (%d attempts) without a new exit", got)
	}
}

// A sidecar's exit restarts them all too; while the init container runs
// again, the app container killed for it waits (PodInitializing) and the
// pod (restartPolicy Never) does not end Failed.
func TestRestartAllFromASidecarKeepsThePodAlive(t *testing.T) {
	h := newHarness(t, withSources("api"))
	src := restartAllOn42(sidecar("src"))
	always := v1.ContainerRestartPolicyAlways
	src.RestartPolicy = &always
	pod := withInit(apiPod("uid-rs", "web", "app"), v1.Container{Name: "init", Image: "host"}, src)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	step := func() { h.clk.Step(time.Second) }

	h.snapshot("api", pod) // init
	step()
	h.rt.exit(t, pod.UID, "init", 0)
	h.event(pod) // src
	step()
	h.event(pod) // app
	step()
	h.rt.exit(t, pod.UID, "src", 42)
	h.event(pod) // kill app, start init again
	step()
	h.rt.exit(t, pod.UID, "init", 0)
	h.event(pod)
	st := h.status(pod)
	if st.Phase == v1.PodFailed || st.Phase == v1.PodSucceeded {
		t.Fatalf("phase %s while the pod restarts all its containers", st.Phase)
	}
	step()
	h.event(pod)
	for name, want := range map[string]int{"init": 2, "src": 2, "app": 2} {
		if got := h.rt.attempts(pod.UID, name); got != want {
			t.Errorf("%s: %d attempts, want %d", name, got, want)
		}
	}
	if st := h.status(pod); st.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", st.Phase)
	}
}
