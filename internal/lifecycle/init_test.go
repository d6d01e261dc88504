package lifecycle

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/podspec"
)

func withInit(pod *v1.Pod, inits ...v1.Container) *v1.Pod {
	pod.Spec.InitContainers = inits
	return pod
}

func sidecar(name string) v1.Container {
	always := v1.ContainerRestartPolicyAlways
	return v1.Container{Name: name, Image: "host", RestartPolicy: &always}
}

func condition(st v1.PodStatus, typ v1.PodConditionType) v1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// TestInitContainersRunInOrder: init containers run one at a time, each
// after the previous one succeeded; a failed one is retried (Always) before
// anything after it; the app starts only when all are done. Meanwhile the
// pod is Pending with Initialized=False.
func TestInitContainersRunInOrder(t *testing.T) {
	h := newHarness(t)
	pod := withInit(filePod("u1", "web", v1.RestartPolicyAlways, "app"),
		v1.Container{Name: "i1", Image: "host"}, v1.Container{Name: "i2", Image: "host"})
	h.snapshot(podspec.SourceFile, pod)
	running := func() []string {
		var out []string
		for _, c := range h.rt.pod(pod.UID).Containers {
			if c.State == "running" {
				out = append(out, c.Name)
			}
		}
		return out
	}
	expect := func(step string, want ...string) {
		t.Helper()
		got := running()
		if len(got) != len(want) {
			t.Fatalf("%s: running %v, want %v", step, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: running %v, want %v", step, got, want)
			}
		}
	}
	expect("first sync", "i1")
	st := h.status(pod)
	if st.Phase != v1.PodPending || condition(st, v1.PodInitialized) != v1.ConditionFalse {
		t.Fatalf("during init: phase %s Initialized %s, want Pending and False", st.Phase, condition(st, v1.PodInitialized))
	}
	h.event(pod)
	expect("i1 still runs", "i1")

	h.rt.exit(t, pod.UID, "i1", 1)
	h.event(pod)
	expect("i1 failed: retried first", "i1")
	if h.rt.attempts(pod.UID, "i2") != 0 {
		t.Fatal("i2 started after i1 failed")
	}
	h.rt.exit(t, pod.UID, "i1", 0)
	h.event(pod)
	expect("i1 done", "i2")
	h.rt.exit(t, pod.UID, "i2", 0)
	h.event(pod)
	expect("init done", "app")
	st = h.status(pod)
	if st.Phase != v1.PodRunning || condition(st, v1.PodInitialized) != v1.ConditionTrue || condition(st, v1.PodReady) != v1.ConditionTrue {
		t.Fatalf("after init: phase %s conditions %+v", st.Phase, st.Conditions)
	}
}

// TestFailedInitContainerFailsANeverPod: under restartPolicy Never a
// failed init container fails the pod; no app container ever starts.
func TestFailedInitContainerFailsANeverPod(t *testing.T) {
	h := newHarness(t)
	pod := withInit(filePod("u1", "job", v1.RestartPolicyNever, "app"), v1.Container{Name: "i1", Image: "host"})
	h.snapshot(podspec.SourceFile, pod)
	h.rt.exit(t, pod.UID, "i1", 2)
	h.event(pod)
	if h.rt.attempts(pod.UID, "app") != 0 || h.rt.attempts(pod.UID, "i1") != 1 {
		t.Fatalf("a Never pod retried its init container or started its app")
	}
	if st := h.status(pod); st.Phase != v1.PodFailed {
		t.Fatalf("phase %s, want Failed", st.Phase)
	}
}

// TestSidecarOrdering: a sidecar starts before the init containers after
// it, keeps running beside the app, and is restarted when it dies, even
// under restartPolicy Never.
func TestSidecarOrdering(t *testing.T) {
	h := newHarness(t)
	pod := withInit(filePod("u1", "web", v1.RestartPolicyNever, "app"), sidecar("proxy"), v1.Container{Name: "migrate", Image: "host"})
	h.snapshot(podspec.SourceFile, pod)
	if h.rt.attempts(pod.UID, "proxy") != 1 || h.rt.attempts(pod.UID, "migrate") != 0 {
		t.Fatal("first sync must start only the sidecar")
	}
	h.event(pod)
	if h.rt.attempts(pod.UID, "migrate") != 1 {
		t.Fatal("the init container after a running sidecar did not start")
	}
	h.rt.exit(t, pod.UID, "migrate", 0)
	h.event(pod)
	if h.rt.attempts(pod.UID, "app") != 1 {
		t.Fatal("app did not start after init")
	}
	h.rt.exit(t, pod.UID, "proxy", 1)
	h.event(pod)
	if h.rt.attempts(pod.UID, "proxy") != 2 {
		t.Fatal("a dead sidecar was not restarted under Never")
	}
	// The app finishing ends the pod, sidecar and all.
	h.rt.exit(t, pod.UID, "app", 0)
	h.event(pod)
	if st := h.status(pod); st.Phase != v1.PodSucceeded {
		t.Fatalf("phase %s, want Succeeded once the app exited 0", st.Phase)
	}
	if c := h.rt.pod(pod.UID).FindContainer("proxy"); c.State == "running" {
		t.Fatal("the sidecar outlived the pod")
	}
}

// TestSidecarStartupProbeGates: a sidecar with a startupProbe holds back
// the init and app containers after it until the probe succeeds, as the
// kubelet does; without one, running is enough (TestSidecarOrdering).
func TestSidecarStartupProbeGates(t *testing.T) {
	h := newHarness(t)
	proxy := sidecar("proxy")
	proxy.StartupProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	pod := withInit(filePod("u1", "web", v1.RestartPolicyAlways, "app"), proxy, v1.Container{Name: "migrate", Image: "host"})
	h.snapshot(podspec.SourceFile, pod)
	for i := 0; i < 3; i++ {
		h.event(pod)
		if h.rt.attempts(pod.UID, "migrate") != 0 || h.rt.attempts(pod.UID, "app") != 0 {
			t.Fatal("a container after the sidecar started before its startup probe succeeded")
		}
	}
	if st := h.status(pod); st.Phase != v1.PodPending || condition(st, v1.PodInitialized) != v1.ConditionFalse {
		t.Fatalf("waiting for the sidecar: phase %s, Initialized %s; want Pending, False", st.Phase, condition(st, v1.PodInitialized))
	}
	h.prober.started[h.rt.pod(pod.UID).FindContainer("proxy").ID] = true
	h.event(pod)
	if h.rt.attempts(pod.UID, "migrate") != 1 {
		t.Fatal("the init container did not start once the sidecar started")
	}
	h.rt.exit(t, pod.UID, "migrate", 0)
	h.event(pod)
	if h.rt.attempts(pod.UID, "app") != 1 {
		t.Fatal("the app did not start after init")
	}
}
