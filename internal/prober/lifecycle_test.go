package prober

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/container"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
)

// started is a running Manager on a fake clock.
type started struct {
	m      *Manager
	clk    *clocktesting.FakeClock
	status *fakeStatus
	rec    *recorder
}

func startManager(t *testing.T, execer interface {
	ExecSync(context.Context, container.ID, []string, time.Duration) ([]byte, []byte, int32, error)
}) *started {
	t.Helper()
	s := &started{clk: clocktesting.NewFakeClock(epoch), status: &fakeStatus{}, rec: &recorder{}}
	m, err := NewManager(Config{Status: s.status, Execer: execer, Recorder: s.rec, Clock: s.clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.Start(ctx)
	t.Cleanup(func() { cancel(); m.Stop() })
	s.m = m
	return s
}

// await steps the fake clock a second at a time until an update matching
// want arrives, and returns the updates seen on the way.
func (s *started) await(t *testing.T, what string, want func(Update) bool) []Update {
	t.Helper()
	var seen []Update
	deadline := time.After(30 * time.Second)
	for {
		select {
		case u := <-s.m.Updates():
			seen = append(seen, u)
			if want(u) {
				return seen
			}
		case <-time.After(20 * time.Millisecond):
			s.clk.Step(time.Second)
		case <-deadline:
			t.Fatalf("timed out waiting for %s; updates seen: %+v", what, seen)
		}
	}
}

func is(kind Kind, id string, r Result) func(Update) bool {
	return func(u Update) bool { return u.Kind == kind && u.ContainerID == id && u.Result == r }
}

func TestHTTPReadinessFlipsBothWays(t *testing.T) {
	var code atomic.Int32
	code.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(int(code.Load())) }))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	s := startManager(t, nil)
	pod := newPod("uid-1", v1.Container{Name: "app", ReadinessProbe: &v1.Probe{
		PeriodSeconds: 1, FailureThreshold: 1, TimeoutSeconds: 10,
		ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(int32(port))}},
	}})
	s.status.set(pod.UID, running(s.clk.Now(), "app", "test://cid-1"))
	if err := s.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	s.await(t, "ready", is(Readiness, "test://cid-1", Success))
	code.Store(http.StatusServiceUnavailable)
	s.await(t, "not ready", is(Readiness, "test://cid-1", Failure))
	code.Store(http.StatusOK)
	s.await(t, "ready again", is(Readiness, "test://cid-1", Success))
	if s.m.LivenessFailed(tid("cid-1")) {
		t.Fatal("readiness must never ask for a restart")
	}
	for _, e := range s.rec.list() {
		if !strings.HasPrefix(e, "Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 503") {
			t.Errorf("unexpected event %q", e)
		}
	}
}

func TestExecLivenessFailureRestarts(t *testing.T) {
	health := filepath.Join(t.TempDir(), "healthy")
	if err := os.WriteFile(health, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startManager(t, hostExecer{})
	c := v1.Container{Name: "app", LivenessProbe: &v1.Probe{
		PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 10,
		ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "test -f $(HEALTH) || { echo missing $(HEALTH); exit 1; }"}}},
	}, Env: []v1.EnvVar{{Name: "HEALTH", Value: health}}}
	pod := newPod("uid-1", c)
	s.status.set(pod.UID, running(s.clk.Now(), "app", "test://cid-1"))
	if err := s.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	s.await(t, "initial liveness", is(Liveness, "test://cid-1", Success))
	if err := os.Remove(health); err != nil {
		t.Fatal(err)
	}
	s.await(t, "liveness failure", is(Liveness, "test://cid-1", Failure))
	if !s.m.LivenessFailed(tid("cid-1")) {
		t.Fatal("LivenessFailed = false after the liveness failure")
	}
	failed := 0
	for _, e := range s.rec.list() {
		if e == "Warning Unhealthy Liveness probe failed: missing "+health+"\n" {
			failed++
		}
	}
	if failed != 2 {
		t.Fatalf("events = %q, want two Unhealthy liveness events", s.rec.list())
	}

	// The runtime restarts the container; the new one is healthy.
	if err := os.WriteFile(health, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.status.set(pod.UID, running(s.clk.Now(), "app", "test://cid-2"))
	s.await(t, "the new container's liveness", is(Liveness, "test://cid-2", Success))
	if s.m.LivenessFailed(tid("cid-2")) || s.m.LivenessFailed(tid("cid-1")) {
		t.Fatal("nothing should be failed after the restart")
	}
}

// loggingExecer runs commands on the host and remembers them in order.
type loggingExecer struct {
	mu  sync.Mutex
	ran []string
}

func (l *loggingExecer) ExecSync(ctx context.Context, id container.ID, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	l.mu.Lock()
	l.ran = append(l.ran, cmd[len(cmd)-1])
	l.mu.Unlock()
	return hostExecer{}.ExecSync(ctx, id, cmd, timeout)
}

func (l *loggingExecer) log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ran...)
}

func TestStartupProtectsSlowStarter(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "started")
	ex := &loggingExecer{}
	s := startManager(t, ex)
	check := func(tag string) v1.ProbeHandler {
		return v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "test -f " + ready + " # " + tag}}}
	}
	pod := newPod("uid-1", v1.Container{Name: "app",
		StartupProbe:  &v1.Probe{PeriodSeconds: 1, FailureThreshold: 1000, TimeoutSeconds: 10, ProbeHandler: check("startup")},
		LivenessProbe: &v1.Probe{PeriodSeconds: 1, FailureThreshold: 1, TimeoutSeconds: 10, ProbeHandler: check("liveness")},
	})
	s.status.set(pod.UID, running(s.clk.Now(), "app", "test://cid-1"))
	if err := s.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	// Let the startup probe fail a few times: the container is slow.
	waitFor(t, "three startup probes", func() bool {
		s.clk.Step(time.Second)
		return len(ex.log()) >= 3
	})
	for _, cmd := range ex.log() {
		if strings.HasSuffix(cmd, "liveness") {
			t.Fatalf("the liveness probe ran before the container started: %q", ex.log())
		}
	}
	if s.m.LivenessFailed(tid("cid-1")) || s.m.StartupFailed(tid("cid-1")) {
		t.Fatal("a slow starter must not be killed")
	}
	if err := os.WriteFile(ready, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	seen := s.await(t, "started", is(Startup, "test://cid-1", Success))
	for _, u := range seen {
		if u.Kind == Liveness && u.Result == Failure {
			t.Fatalf("liveness failed during startup: %+v", seen)
		}
	}
	waitFor(t, "a liveness probe after start", func() bool {
		s.clk.Step(time.Second)
		for _, cmd := range ex.log() {
			if strings.HasSuffix(cmd, "liveness") {
				return true
			}
		}
		return false
	})
	if s.m.LivenessFailed(tid("cid-1")) {
		t.Fatal("the started container is alive")
	}
}

func TestTerminatingPodKeepsReadiness(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	s := startManager(t, nil)
	h := v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(int32(port))}}
	pod := newPod("uid-1", v1.Container{Name: "app",
		ReadinessProbe: &v1.Probe{PeriodSeconds: 1, TimeoutSeconds: 10, ProbeHandler: h},
		LivenessProbe:  &v1.Probe{PeriodSeconds: 1, TimeoutSeconds: 10, ProbeHandler: h},
	})
	s.status.set(pod.UID, running(s.clk.Now(), "app", "test://cid-1"))
	if err := s.m.AddPod(pod); err != nil {
		t.Fatal(err)
	}
	s.await(t, "ready", is(Readiness, "test://cid-1", Success))
	s.m.StopLivenessAndStartup(pod)
	if _, ok := s.m.Get(Liveness, "test://cid-1"); ok {
		t.Fatal("liveness should be gone once the pod terminates")
	}
	before := hits.Load()
	waitFor(t, "readiness probes while terminating", func() bool {
		s.clk.Step(time.Second)
		return hits.Load() >= before+3
	})
	if r, _ := s.m.Get(Readiness, "test://cid-1"); r != Success {
		t.Fatalf("readiness = %v while terminating, want Success", r)
	}
	s.m.RemovePod(pod)
	if _, ok := s.m.Get(Readiness, "test://cid-1"); ok {
		t.Fatal("RemovePod should forget readiness")
	}
}

func TestStopIsIdempotent(t *testing.T) {
	m, err := NewManager(Config{Status: &fakeStatus{}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()
	m.Stop()
	m.Start(context.Background()) // after Stop: does nothing
	m.Stop()

	m2, err := NewManager(Config{Status: &fakeStatus{}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	m2.Start(context.Background())
	m2.Stop()
	m2.Stop()
}
