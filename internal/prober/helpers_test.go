package prober

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	osexec "os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/container"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// hostExecer runs probe commands as real host processes, as the embedded
// runtime's ExecSync does; the container ID is ignored.
type hostExecer struct{}

func (hostExecer) ExecSync(ctx context.Context, _ container.ID, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := osexec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ctx.Err() != nil {
		return out.Bytes(), errb.Bytes(), -1, fmt.Errorf("exec %v: %w", cmd, ctx.Err())
	}
	var exitErr *osexec.ExitError
	if errors.As(err, &exitErr) {
		return out.Bytes(), errb.Bytes(), int32(exitErr.ExitCode()), nil
	}
	return out.Bytes(), errb.Bytes(), 0, err
}

// outcome is what the next exec probe does.
type outcome int

const (
	pass outcome = iota // a process that exits 0
	fail                // a process that prints "probe said no" and exits 1
	errs                // the runtime cannot exec at all
)

// scriptedExecer plays a queue of outcomes with real processes; a probe
// that finds the queue empty is recorded as unexpected.
type scriptedExecer struct {
	mu         sync.Mutex
	queue      []outcome
	calls      int
	unexpected int
}

var errRuntimeDown = errors.New("runtime is down")

func (s *scriptedExecer) play(o ...outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, o...)
}

func (s *scriptedExecer) left() (queued, calls, unexpected int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), s.calls, s.unexpected
}

func (s *scriptedExecer) ExecSync(ctx context.Context, id container.ID, _ []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	s.mu.Lock()
	s.calls++
	if len(s.queue) == 0 {
		s.unexpected++
		s.mu.Unlock()
		return nil, nil, -1, errRuntimeDown
	}
	o := s.queue[0]
	s.queue = s.queue[1:]
	s.mu.Unlock()
	switch o {
	case errs:
		return nil, nil, -1, errRuntimeDown
	case fail:
		return hostExecer{}.ExecSync(ctx, id, []string{"sh", "-c", "echo probe said no; exit 1"}, 10*time.Second)
	default:
		return hostExecer{}.ExecSync(ctx, id, []string{"true"}, 10*time.Second)
	}
}

// fakeStatus is the agent's status manager as the prober sees it.
type fakeStatus struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

func (f *fakeStatus) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.m[uid]
	return *s.DeepCopy(), ok
}

func (f *fakeStatus) set(uid types.UID, s v1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[types.UID]v1.PodStatus{}
	}
	f.m[uid] = s
}

// recorder keeps events as "Type Reason Message", and the objects.
type recorder struct {
	mu     sync.Mutex
	events []string
	objs   []runtime.Object
}

func (r *recorder) Event(o runtime.Object, typ, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, typ+" "+reason+" "+msg)
	r.objs = append(r.objs, o)
}

func (r *recorder) objects() []runtime.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.Object(nil), r.objs...)
}

func (r *recorder) Eventf(o runtime.Object, typ, reason, format string, args ...any) {
	r.Event(o, typ, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness is a Manager that is not started: tests call doProbe themselves.
type harness struct {
	m      *Manager
	clk    *clocktesting.FakeClock
	status *fakeStatus
	exec   *scriptedExecer
	rec    *recorder
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{clk: clocktesting.NewFakeClock(epoch), status: &fakeStatus{}, exec: &scriptedExecer{}, rec: &recorder{}}
	m, err := NewManager(Config{Status: h.status, Execer: h.exec, Recorder: h.rec, Clock: h.clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	h.m = m
	return h
}

func (h *harness) worker(t *testing.T, pod *v1.Pod, container string, k Kind) *worker {
	t.Helper()
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	w, ok := h.m.workers[probeKey{podUID: pod.UID, container: container, kind: k}]
	if !ok {
		t.Fatalf("no %v worker for %s", k, container)
	}
	return w
}

// step plays outcomes through one doProbe of w and checks they were all
// used and nothing more was probed.
func (h *harness) step(t *testing.T, w *worker, o ...outcome) bool {
	t.Helper()
	_, before, _ := h.exec.left()
	h.exec.play(o...)
	keep := h.m.doProbe(context.Background(), w)
	queued, after, unexpected := h.exec.left()
	if queued != 0 || unexpected != 0 || after-before != len(o) {
		t.Fatalf("doProbe(%v) ran %d probes, want %d", w.kind, after-before, len(o))
	}
	return keep
}

func execProbe() *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check"}}}}
}

func newPod(uid string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: types.UID(uid)},
		Spec:       v1.PodSpec{Containers: containers, RestartPolicy: v1.RestartPolicyAlways},
	}
}

// running is the status of a pod whose containers run with the given IDs
// (name=id pairs), started an hour before now.
func running(now time.Time, ids ...string) v1.PodStatus {
	s := v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1"}
	for i := 0; i+1 < len(ids); i += 2 {
		s.ContainerStatuses = append(s.ContainerStatuses, v1.ContainerStatus{
			Name: ids[i], ContainerID: ids[i+1],
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-time.Hour))}},
		})
	}
	return s
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tid is the typed form of the "test://<id>" container IDs the tests use.
func tid(id string) container.ID { return container.ID{Type: "test", ID: id} }
