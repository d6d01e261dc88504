package prober

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/errdefs"
)

func TestNewManagerValidates(t *testing.T) {
	if _, err := NewManager(Config{}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "Status") {
		t.Fatalf("err = %v, want ErrInvalidArgument naming Status", err)
	}
	if _, err := NewManager(Config{Status: &fakeStatus{}, MaxInFlight: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
}

func TestAddPodValidates(t *testing.T) {
	tcp := func(port intstr.IntOrString) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: port}}}
	}
	tests := []struct {
		name  string
		c     v1.Container
		field string
	}{
		{"liveness successThreshold must be 1", v1.Container{LivenessProbe: &v1.Probe{SuccessThreshold: 2, ProbeHandler: execProbe().ProbeHandler}},
			"spec.containers[0].livenessProbe.successThreshold: must be 1"},
		{"startup successThreshold must be 1", v1.Container{StartupProbe: &v1.Probe{SuccessThreshold: 3, ProbeHandler: execProbe().ProbeHandler}},
			"spec.containers[0].startupProbe.successThreshold: must be 1"},
		{"no handler", v1.Container{ReadinessProbe: &v1.Probe{}}, "spec.containers[0].readinessProbe.handler"},
		{"two handlers", v1.Container{ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: execProbe().Exec, GRPC: &v1.GRPCAction{Port: 1}}}},
			"spec.containers[0].readinessProbe.handler"},
		{"negative period", v1.Container{LivenessProbe: &v1.Probe{PeriodSeconds: -1, ProbeHandler: execProbe().ProbeHandler}},
			"livenessProbe.periodSeconds: must not be negative"},
		{"unknown named port", v1.Container{LivenessProbe: tcp(intstr.FromString("nope"))}, "livenessProbe.tcpSocket.port"},
		{"grace period on readiness", v1.Container{ReadinessProbe: &v1.Probe{TerminationGracePeriodSeconds: ptr.To[int64](5), ProbeHandler: execProbe().ProbeHandler}},
			"readinessProbe.terminationGracePeriodSeconds"},
		{"empty exec command", v1.Container{LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{}}}}, "livenessProbe.exec.command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			tt.c.Name = "app"
			pod := newPod("uid-1", tt.c)
			err := h.m.AddPod(pod)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), "default/web") {
				t.Fatalf("err = %v, want ErrInvalidArgument naming the pod and %q", err, tt.field)
			}
			if len(h.m.workers) != 0 {
				t.Fatal("an invalid pod must start no probe")
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	h := newHarness(t)
	pod := newPod("uid-1", v1.Container{Name: "app", LivenessProbe: execProbe()})
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	s := h.worker(t, pod, "app", Liveness).spec
	if s.PeriodSeconds != 10 || s.TimeoutSeconds != 1 || s.SuccessThreshold != 1 || s.FailureThreshold != 3 || s.InitialDelaySeconds != 0 {
		t.Fatalf("defaults = period %d timeout %d success %d failure %d delay %d", s.PeriodSeconds, s.TimeoutSeconds, s.SuccessThreshold, s.FailureThreshold, s.InitialDelaySeconds)
	}
}

func TestProbedContainers(t *testing.T) {
	h := newHarness(t)
	always := v1.ContainerRestartPolicyAlways
	pod := newPod("uid-1", v1.Container{Name: "app", ReadinessProbe: execProbe()})
	pod.Spec.InitContainers = []v1.Container{
		{Name: "setup", ReadinessProbe: execProbe()}, // a plain init container: never probed
		{Name: "sidecar", RestartPolicy: &always, LivenessProbe: execProbe()},
	}
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	if len(h.m.workers) != 2 {
		t.Fatalf("workers = %v, want app readiness and sidecar liveness", h.m.workers)
	}
	w := h.worker(t, pod, "sidecar", Liveness)
	s := v1.PodStatus{Phase: v1.PodRunning, InitContainerStatuses: running(h.clk.Now(), "sidecar", "test://cid-s").ContainerStatuses}
	h.status.set(pod.UID, s)
	h.step(t, w, fail)
	h.step(t, w, fail)
	h.step(t, w, fail)
	if !h.m.LivenessFailed(tid("cid-s")) {
		t.Fatal("the sidecar's liveness probe should have failed")
	}
}

func TestUpdatePodStatus(t *testing.T) {
	tests := []struct {
		name        string
		c           v1.Container
		results     map[Kind]Result
		notRunning  bool
		wantStarted bool
		wantReady   bool
	}{
		{"no probes, running", v1.Container{}, nil, false, true, true},
		{"no probes, not running", v1.Container{}, nil, true, false, false},
		{"readiness not run yet", v1.Container{ReadinessProbe: execProbe()}, nil, false, true, false},
		{"readiness success", v1.Container{ReadinessProbe: execProbe()}, map[Kind]Result{Readiness: Success}, false, true, true},
		{"readiness failure", v1.Container{ReadinessProbe: execProbe()}, map[Kind]Result{Readiness: Failure}, false, true, false},
		{"startup not run yet", v1.Container{StartupProbe: execProbe()}, nil, false, false, false},
		{"startup success, no readiness probe", v1.Container{StartupProbe: execProbe()}, map[Kind]Result{Startup: Success}, false, true, true},
		{"readiness success but not started", v1.Container{StartupProbe: execProbe(), ReadinessProbe: execProbe()},
			map[Kind]Result{Startup: Unknown, Readiness: Success}, false, false, false},
		{"readiness success but exited", v1.Container{ReadinessProbe: execProbe()}, map[Kind]Result{Readiness: Success}, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			tt.c.Name = "app"
			pod := newPod("uid-1", tt.c)
			if err := h.m.AddPod(pod); err != nil {
				t.Fatal(err)
			}
			for k, r := range tt.results {
				h.m.setResult(h.worker(t, pod, "app", k), "test://cid-1", r)
			}
			s := running(h.clk.Now(), "app", "test://cid-1")
			if tt.notRunning {
				s.ContainerStatuses[0].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}
			}
			s.ContainerStatuses[0].Ready = true // stale: must be recomputed
			h.m.UpdatePodStatus(pod, &s)
			cs := s.ContainerStatuses[0]
			if cs.Started == nil || *cs.Started != tt.wantStarted || cs.Ready != tt.wantReady {
				t.Fatalf("started %v ready %v, want %v %v", ptr.Deref(cs.Started, false), cs.Ready, tt.wantStarted, tt.wantReady)
			}
		})
	}
}

func TestUpdatePodStatusInitContainers(t *testing.T) {
	h := newHarness(t)
	always := v1.ContainerRestartPolicyAlways
	pod := newPod("uid-1", v1.Container{Name: "app"})
	pod.Spec.InitContainers = []v1.Container{{Name: "setup"}, {Name: "sidecar", RestartPolicy: &always, ReadinessProbe: execProbe()}}
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	s := running(h.clk.Now(), "app", "test://cid-1")
	s.InitContainerStatuses = []v1.ContainerStatus{
		{Name: "setup", ContainerID: "test://cid-i", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}},
		running(h.clk.Now(), "sidecar", "test://cid-s").ContainerStatuses[0],
	}
	h.m.UpdatePodStatus(pod, &s)
	if !s.InitContainerStatuses[0].Ready {
		t.Error("an init container that exited 0 is ready")
	}
	if s.InitContainerStatuses[1].Ready {
		t.Error("a sidecar whose readiness probe has not run is not ready")
	}
	h.m.setResult(h.worker(t, pod, "sidecar", Readiness), "test://cid-s", Success)
	h.m.UpdatePodStatus(pod, &s)
	if !s.InitContainerStatuses[1].Ready || !ptr.Deref(s.InitContainerStatuses[1].Started, false) {
		t.Error("a started sidecar with a successful readiness probe is ready")
	}
}

func TestUpdatePodStatusTriggersFirstReadinessProbe(t *testing.T) {
	h := newHarness(t)
	p := execProbe()
	p.PeriodSeconds = 60
	pod := newPod("uid-1", v1.Container{Name: "app", ReadinessProbe: p})
	h.clk.Step(time.Hour) // the agent is not new: no start jitter
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	w := h.worker(t, pod, "app", Readiness)
	h.m.sched.mu.Lock()
	h.m.sched.pushLocked(w, h.clk.Now().Add(time.Minute)) // as if it had just run
	h.m.sched.mu.Unlock()
	s := running(h.clk.Now(), "app", "test://cid-1")
	h.m.UpdatePodStatus(pod, &s)
	h.m.sched.mu.Lock()
	due := w.due
	h.m.sched.mu.Unlock()
	if !due.Equal(h.clk.Now()) {
		t.Fatalf("readiness due at %v, want now (%v)", due, h.clk.Now())
	}
}

func TestLastReadinessSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	h.m.cfg.LastReadiness = func(id string) bool { return id == "test://cid-1" }
	p := execProbe()
	p.FailureThreshold = 2
	pod := newPod("uid-1", v1.Container{Name: "app", ReadinessProbe: p})
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	s := running(h.clk.Now(), "app", "test://cid-1")
	h.status.set(pod.UID, s)
	h.m.UpdatePodStatus(pod, &s)
	if !s.ContainerStatuses[0].Ready {
		t.Fatal("a container that was ready before the restart stays ready until probed")
	}
	w := h.worker(t, pod, "app", Readiness)
	h.step(t, w, fail)
	if r, _ := h.m.Get(Readiness, "test://cid-1"); r != Success {
		t.Fatalf("readiness = %v after one failure of two, want Success", r)
	}
	h.step(t, w, fail)
	if r, _ := h.m.Get(Readiness, "test://cid-1"); r != Failure {
		t.Fatalf("readiness = %v, want Failure", r)
	}
}

func TestRemoveAndCleanup(t *testing.T) {
	h := newHarness(t)
	p := execProbe()
	p.FailureThreshold = 1
	mk := func(uid string) *v1.Pod {
		return newPod(uid, v1.Container{Name: "app", LivenessProbe: p, ReadinessProbe: execProbe(), StartupProbe: execProbe()})
	}
	a, b, c := mk("a"), mk("b"), mk("c")
	for _, pod := range []*v1.Pod{a, b, c} {
		if err := h.m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
		h.m.setResult(h.worker(t, pod, "app", Liveness), "test://cid-"+string(pod.UID), Failure)
	}
	h.m.StopLivenessAndStartup(a)
	if _, ok := h.m.workers[probeKey{a.UID, "app", Readiness}]; !ok || len(h.m.workers) != 7 {
		t.Fatalf("after StopLivenessAndStartup only a's readiness probe should be left of a's (workers %d)", len(h.m.workers))
	}
	if h.m.LivenessFailed(tid("cid-a")) {
		t.Fatal("a stopped liveness probe leaves no result")
	}
	h.m.RemovePod(a)
	h.m.CleanupPods(map[types.UID]struct{}{"b": {}})
	if len(h.m.workers) != 3 || !h.m.LivenessFailed(tid("cid-b")) || h.m.LivenessFailed(tid("cid-c")) {
		t.Fatalf("after cleanup only b's probes should be left (workers %d)", len(h.m.workers))
	}
	if n := h.m.sched.scheduled(); n != 3 {
		t.Fatalf("%d workers scheduled, want 3", n)
	}
}

func TestLivenessAndStartupFailed(t *testing.T) {
	h := newHarness(t)
	c := v1.Container{Name: "app", LivenessProbe: execProbe(), StartupProbe: execProbe()}
	pod := newPod("uid-1", c)
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	if h.m.LivenessFailed(tid("cid-1")) || h.m.StartupFailed(tid("cid-1")) {
		t.Fatal("nothing failed yet")
	}
	h.m.setResult(h.worker(t, pod, "app", Startup), "test://cid-1", Failure)
	if !h.m.StartupFailed(tid("cid-1")) || h.m.LivenessFailed(tid("cid-1")) {
		t.Fatal("startup failure: want StartupFailed only")
	}
	h.m.setResult(h.worker(t, pod, "app", Liveness), "test://cid-1", Failure)
	if !h.m.LivenessFailed(tid("cid-1")) || h.m.LivenessFailed(tid("cid-2")) {
		t.Fatal("liveness failure: want LivenessFailed for cid-1 only")
	}
}

func TestStartJitter(t *testing.T) {
	h := newHarness(t)
	p := execProbe() // period 10s
	pods := []*v1.Pod{}
	for _, uid := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		pod := newPod(uid, v1.Container{Name: "app", LivenessProbe: p})
		pods = append(pods, pod)
		if err := h.m.AddPod(pod); err != nil {
			t.Fatal(err)
		}
	}
	h.m.sched.mu.Lock()
	for _, pod := range pods {
		w := h.m.workers[probeKey{pod.UID, "app", Liveness}]
		if w.due.Before(epoch) || !w.due.Before(epoch.Add(10*time.Second)) {
			t.Errorf("first probe at %v, want within the first period after %v", w.due, epoch)
		}
	}
	h.m.sched.mu.Unlock()

	h.clk.Step(10 * time.Second) // the agent has run a whole period: new pods are probed at once
	late := newPod("late", v1.Container{Name: "app", LivenessProbe: p})
	if err := h.m.AddPod(late); err != nil {
		t.Fatal(err)
	}
	h.m.sched.mu.Lock()
	defer h.m.sched.mu.Unlock()
	if w := h.m.workers[probeKey{"late", "app", Liveness}]; !w.due.Equal(h.clk.Now()) {
		t.Errorf("late pod first probe at %v, want now", w.due)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t)
	m, err := NewManager(Config{Status: h.status, Execer: h.exec, Clock: h.clk, Logger: testLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	if _, err := NewManager(Config{Status: h.status, Registerer: reg}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second registration: err = %v, want ErrAlreadyExists", err)
	}
	pod := newPod("uid-1", v1.Container{Name: "app", LivenessProbe: execProbe()})
	if err := m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	h.status.set(pod.UID, running(h.clk.Now(), "app", "test://cid-1"))
	w := h.worker(t, pod, "app", Liveness)
	h.step(t, w, pass)
	h.step(t, w, fail)
	h.step(t, w, pass)
	ok := counterValue(t, m.metrics.total.WithLabelValues("Liveness", "successful", "app", "web", "default", "uid-1"))
	failed := counterValue(t, m.metrics.total.WithLabelValues("Liveness", "failed", "app", "web", "default", "uid-1"))
	if ok != 2 || failed != 1 {
		t.Fatalf("prober_probe_total successful=%v failed=%v, want 2 and 1", ok, failed)
	}
	if n := seriesCount(t, reg, "prober_probe_duration_seconds"); n != 1 {
		t.Fatalf("duration series = %d, want 1", n)
	}
	m.RemovePod(pod)
	if n := seriesCount(t, reg, "prober_probe_total"); n != 0 {
		t.Fatalf("%d prober_probe_total series left after RemovePod, want 0", n)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// TestLastStartedSurvivesRestart: after an agent restart, a container that
// had passed its startup probe counts as started, and stays ready, until a
// probe says otherwise; its startup probe is not run again, and a sidecar
// that had started does not hold back what follows it.
func TestLastStartedSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	h.m.cfg.LastReadiness = func(id string) bool { return id == "test://cid-1" }
	h.m.cfg.LastStarted = func(id string) bool { return id == "test://cid-1" }
	pod := newPod("uid-1", v1.Container{Name: "app", StartupProbe: execProbe(), ReadinessProbe: execProbe()})
	if err := h.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	s := running(h.clk.Now(), "app", "test://cid-1")
	h.status.set(pod.UID, s)
	h.m.UpdatePodStatus(pod, &s)
	if cs := s.ContainerStatuses[0]; cs.Started == nil || !*cs.Started || !cs.Ready {
		t.Fatalf("before any probe after a restart: started %v ready %v, want both true", cs.Started, cs.Ready)
	}
	if !h.m.StartupSucceeded(tid("cid-1")) || h.m.StartupSucceeded(tid("cid-2")) {
		t.Fatal("StartupSucceeded must follow the saved startup of exactly that container")
	}
	h.step(t, h.worker(t, pod, "app", Startup)) // rests: no probe run
	if r, _ := h.m.Get(Startup, "test://cid-1"); r != Success {
		t.Fatalf("startup result = %v, want Success", r)
	}

	// A new instance of the container starts over.
	s = running(h.clk.Now(), "app", "test://cid-2")
	h.status.set(pod.UID, s)
	h.m.UpdatePodStatus(pod, &s)
	if cs := s.ContainerStatuses[0]; *cs.Started || cs.Ready {
		t.Fatal("a container that never passed its startup probe counts as started")
	}
}
