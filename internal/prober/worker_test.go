package prober

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestThresholdsAndHold(t *testing.T) {
	type step struct {
		probes []outcome // what the probes of this step do; none: no probe may run
		want   Result
	}
	tests := []struct {
		name      string
		kind      Kind
		success   int32
		failure   int32
		steps     []step
		wantCalls int
	}{
		{
			name: "liveness fails after failureThreshold consecutive failures, then holds",
			kind: Liveness, failure: 3,
			steps: []step{{[]outcome{fail}, Success}, {[]outcome{fail}, Success}, {[]outcome{fail}, Failure}, {nil, Failure}, {nil, Failure}},
		},
		{
			name: "a success breaks the run of failures",
			kind: Liveness, failure: 2,
			steps: []step{{[]outcome{fail}, Success}, {[]outcome{pass}, Success}, {[]outcome{fail}, Success}, {[]outcome{fail}, Failure}},
		},
		{
			name: "readiness starts as failure and needs successThreshold successes",
			kind: Readiness, success: 2, failure: 1,
			steps: []step{{[]outcome{pass}, Failure}, {[]outcome{pass}, Success}, {[]outcome{fail}, Failure}, {[]outcome{pass}, Failure}, {[]outcome{pass}, Success}},
		},
		{
			name: "readiness does not hold after a failure",
			kind: Readiness, failure: 1,
			steps: []step{{[]outcome{fail}, Failure}, {[]outcome{pass}, Success}, {[]outcome{fail}, Failure}, {[]outcome{fail}, Failure}},
		},
		{
			name: "errors are retried three times and do not count",
			kind: Liveness, failure: 2,
			steps: []step{{[]outcome{fail}, Success}, {[]outcome{errs, errs, errs}, Success}, {[]outcome{fail}, Failure}},
		},
		{
			name:  "an error then a success within the retries is a success",
			kind:  Readiness,
			steps: []step{{[]outcome{errs, pass}, Success}},
		},
		{
			name: "startup starts unknown, fails after failureThreshold, then holds",
			kind: Startup, failure: 2,
			steps: []step{{[]outcome{fail}, Unknown}, {[]outcome{fail}, Failure}, {nil, Failure}},
		},
		{
			name:  "startup rests once the container started",
			kind:  Startup,
			steps: []step{{[]outcome{pass}, Success}, {nil, Success}, {nil, Success}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			p := execProbe()
			p.SuccessThreshold, p.FailureThreshold = tt.success, tt.failure
			c := v1.Container{Name: "app"}
			switch tt.kind {
			case Liveness:
				c.LivenessProbe = p
			case Readiness:
				c.ReadinessProbe = p
			case Startup:
				c.StartupProbe = p
			}
			pod := newPod("uid-1", c)
			if err := h.m.AddPod(pod); err != nil {
				t.Fatal(err)
			}
			h.status.set(pod.UID, running(h.clk.Now(), "app", "test://cid-1"))
			w := h.worker(t, pod, "app", tt.kind)
			for i, s := range tt.steps {
				if !h.step(t, w, s.probes...) {
					t.Fatalf("step %d: worker stopped", i)
				}
				if got, ok := h.m.Get(tt.kind, "test://cid-1"); !ok || got != s.want {
					t.Fatalf("step %d: result = %v (present %v), want %v", i, got, ok, s.want)
				}
			}
		})
	}
}

func TestNewContainerResetsResultAndHold(t *testing.T) {
	h := newHarness(t)
	p := execProbe()
	p.FailureThreshold = 1
	pod := newPod("uid-1", v1.Container{Name: "app", LivenessProbe: p})
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	w := h.worker(t, pod, "app", Liveness)
	h.status.set(pod.UID, running(h.clk.Now(), "app", "test://cid-1"))
	h.step(t, w, fail)
	if !h.m.LivenessFailed(tid("cid-1")) {
		t.Fatal("test://cid-1 should have failed its liveness probe")
	}
	h.step(t, w) // on hold: no probe

	// The runtime replaced the container.
	h.status.set(pod.UID, running(h.clk.Now(), "app", "test://cid-2"))
	h.step(t, w, pass)
	if h.m.LivenessFailed(tid("cid-1")) || h.m.LivenessFailed(tid("cid-2")) {
		t.Fatal("after the restart nothing should be failed")
	}
	if _, ok := h.m.Get(Liveness, "test://cid-1"); ok {
		t.Fatal("the old container's result should be gone")
	}
	h.step(t, w, fail) // probing again: the hold is cleared
	if !h.m.LivenessFailed(tid("cid-2")) {
		t.Fatal("test://cid-2 should have failed")
	}
}

func TestStartupGatesLivenessAndReadiness(t *testing.T) {
	h := newHarness(t)
	pod := newPod("uid-1", v1.Container{Name: "app", StartupProbe: execProbe(), LivenessProbe: execProbe(), ReadinessProbe: execProbe()})
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	h.status.set(pod.UID, running(h.clk.Now(), "app", "test://cid-1"))
	live, ready, startup := h.worker(t, pod, "app", Liveness), h.worker(t, pod, "app", Readiness), h.worker(t, pod, "app", Startup)

	h.step(t, live) // not started: no probe
	h.step(t, ready)
	h.step(t, startup, fail)
	h.step(t, live)
	h.step(t, startup, pass)
	h.step(t, live, pass)
	h.step(t, ready, pass)
	h.step(t, startup) // started: startup rests
	if r, _ := h.m.Get(Readiness, "test://cid-1"); r != Success {
		t.Fatalf("readiness = %v, want Success", r)
	}
}

func TestInitialDelay(t *testing.T) {
	h := newHarness(t)
	p := execProbe()
	p.InitialDelaySeconds = 10
	pod := newPod("uid-1", v1.Container{Name: "app", LivenessProbe: p})
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	s := running(h.clk.Now(), "app", "test://cid-1")
	s.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(h.clk.Now())
	h.status.set(pod.UID, s)
	w := h.worker(t, pod, "app", Liveness)
	h.step(t, w)
	h.clk.Step(9 * time.Second)
	h.step(t, w)
	h.clk.Step(time.Second)
	h.step(t, w, pass)
}

func TestPodStates(t *testing.T) {
	now := epoch
	tests := []struct {
		name     string
		kind     Kind
		deleted  bool
		policy   v1.RestartPolicy
		status   func() v1.PodStatus
		wantKeep bool
		want     Result
		wantOK   bool
	}{
		{"pod not known yet", Liveness, false, v1.RestartPolicyAlways, nil, true, Unknown, false},
		{"pod succeeded: worker exits", Readiness, false, v1.RestartPolicyAlways, func() v1.PodStatus {
			s := running(now, "app", "test://cid-1")
			s.Phase = v1.PodSucceeded
			return s
		}, false, Unknown, false},
		{"no container ID yet", Readiness, false, v1.RestartPolicyAlways, func() v1.PodStatus {
			return v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{{Name: "app"}}}
		}, true, Unknown, false},
		{"deleted pod: liveness reports success and stops", Liveness, true, v1.RestartPolicyAlways, func() v1.PodStatus { return running(now, "app", "test://cid-1") }, false, Success, true},
		{"exited container that will restart: failure, keep going", Readiness, false, v1.RestartPolicyAlways, func() v1.PodStatus { return exited(now) }, true, Failure, true},
		{"exited container that will not restart: failure, stop", Readiness, false, v1.RestartPolicyNever, func() v1.PodStatus { return exited(now) }, false, Failure, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			c := v1.Container{Name: "app"}
			if tt.kind == Liveness {
				c.LivenessProbe = execProbe()
			} else {
				c.ReadinessProbe = execProbe()
			}
			pod := newPod("uid-1", c)
			pod.Spec.RestartPolicy = tt.policy
			if tt.deleted {
				pod.DeletionTimestamp = &metav1.Time{Time: now}
			}
			if err := h.m.AddPod(pod); err != nil {
				t.Fatal(err)
			}
			if tt.status != nil {
				h.status.set(pod.UID, tt.status())
			}
			w := h.worker(t, pod, "app", tt.kind)
			if keep := h.step(t, w); keep != tt.wantKeep {
				t.Fatalf("keepGoing = %v, want %v", keep, tt.wantKeep)
			}
			if got, ok := h.m.Get(tt.kind, "test://cid-1"); ok != tt.wantOK || got != tt.want {
				t.Fatalf("result = %v (present %v), want %v (present %v)", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func exited(now time.Time) v1.PodStatus {
	s := running(now, "app", "test://cid-1")
	s.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}}
	return s
}

func TestEvents(t *testing.T) {
	h := newHarness(t)
	pod := newPod("uid-1", v1.Container{Name: "app", LivenessProbe: execProbe(), ReadinessProbe: execProbe()})
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	h.status.set(pod.UID, running(h.clk.Now(), "app", "test://cid-1"))
	h.step(t, h.worker(t, pod, "app", Liveness), fail)
	h.step(t, h.worker(t, pod, "app", Readiness), errs, errs, errs)
	want := []string{
		"Warning Unhealthy Liveness probe failed: probe said no\n",
		"Warning Unhealthy Readiness probe errored and resulted in unknown state: exec probe in container test://cid-1: runtime is down",
	}
	got := h.rec.list()
	if len(got) != len(want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %q, want %q", i, got[i], want[i])
		}
	}
	// As in the kubelet, probe events are about the container.
	for i, o := range h.rec.objects() {
		ref, ok := o.(*v1.ObjectReference)
		if !ok || ref.Kind != "Pod" || ref.Name != pod.Name || ref.UID != pod.UID || ref.FieldPath != "spec.containers{app}" {
			t.Errorf("event %d is about %#v, want the container reference spec.containers{app} of pod %s", i, o, pod.Name)
		}
	}
}

func TestHTTPProbeThroughManager(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "http://localhost:1/elsewhere", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	probeFor := func(path string) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}}}
	}
	h := newHarness(t)
	ports := []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}
	pod := newPod("uid-1",
		v1.Container{Name: "app", Ports: ports, ReadinessProbe: probeFor("/ready")},
		v1.Container{Name: "side", Ports: ports, ReadinessProbe: probeFor("/away")})
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	h.status.set(pod.UID, running(h.clk.Now(), "app", "test://cid-1", "side", "test://cid-2"))
	h.m.doProbe(context.Background(), h.worker(t, pod, "app", Readiness))
	h.m.doProbe(context.Background(), h.worker(t, pod, "side", Readiness))
	for _, id := range []string{"test://cid-1", "test://cid-2"} {
		if r, _ := h.m.Get(Readiness, id); r != Success {
			t.Errorf("%s readiness = %v, want Success", id, r)
		}
	}
	ev := h.rec.list()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning ProbeWarning Readiness probe warning: Probe terminated redirects") {
		t.Fatalf("events = %q, want one ProbeWarning", ev)
	}
}

func TestExpandCommand(t *testing.T) {
	env := []v1.EnvVar{{Name: "PORT", Value: "8080"}, {Name: "SECRET", ValueFrom: &v1.EnvVarSource{}}}
	tests := map[string]string{
		"curl :$(PORT)/x":   "curl :8080/x",
		"$(SECRET)":         "$(SECRET)",
		"$(MISSING) $(PORT": "$(MISSING) $(PORT",
		"$$(PORT) $$ $5":    "$(PORT) $ $5",
		"plain":             "plain",
	}
	for in, want := range tests {
		if got := expandCommand([]string{in}, env)[0]; got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
