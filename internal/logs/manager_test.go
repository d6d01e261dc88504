package logs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/errdefs"
)

// fakeRuntime lists containers with log paths; its reopen starts a new
// file at the path, as a runtime does, and moves the container's writer
// there.
type fakeRuntime struct {
	mu         sync.Mutex
	containers []*runtimeapi.Container
	paths      map[string]string
	statusErr  map[string]error
	writers    map[string]*fakeWriter
	reopenErr  error
	reopened   []string
	statusCall int
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{paths: map[string]string{}, statusErr: map[string]error{}, writers: map[string]*fakeWriter{}}
}

func (f *fakeRuntime) add(id string, state runtimeapi.ContainerState, path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers = append(f.containers, &runtimeapi.Container{Id: id, State: state})
	f.paths[id] = path
}

func (f *fakeRuntime) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.containers {
		if c.Id == id {
			f.containers = append(f.containers[:i], f.containers[i+1:]...)
			return
		}
	}
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*runtimeapi.Container(nil), f.containers...), nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusCall++
	if err := f.statusErr[id]; err != nil {
		return nil, err
	}
	p, ok := f.paths[id]
	if !ok {
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id, LogPath: p}}, nil
}

func (f *fakeRuntime) ReopenContainerLog(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reopened = append(f.reopened, id)
	if f.reopenErr != nil {
		return f.reopenErr
	}
	if w := f.writers[id]; w != nil {
		return w.reopen()
	}
	file, err := os.OpenFile(f.paths[id], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	return file.Close()
}

func (f *fakeRuntime) reopens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reopened...)
}

// fakeWriter appends CRI lines to a file it keeps open, as a container's
// log writer does, until reopened.
type fakeWriter struct {
	mu   sync.Mutex
	path string
	f    *os.File
}

func newFakeWriter(t *testing.T, path string) *fakeWriter {
	w := &fakeWriter{path: path}
	if err := w.reopen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.f.Close() })
	return w
}

func (w *fakeWriter) reopen() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		_ = w.f.Close()
	}
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	w.f = f
	return err
}

func (w *fakeWriter) write(t *testing.T, s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.WriteString(s); err != nil {
		t.Error(err)
	}
}

func newTestManager(t *testing.T, rt Runtime, root string, p Policy, clk *clocktesting.FakeClock) *Manager {
	t.Helper()
	m, err := NewManager(ManagerConfig{Runtime: rt, Root: root, Policy: p, Clock: clk, Interval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func rotatedIn(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, n := range names(t, filepath.Dir(path)) {
		if strings.HasPrefix(n, filepath.Base(path)+".") {
			out = append(out, n)
		}
	}
	return out
}

// Only running containers logging under the root are rotated, and only
// once their file reached the size.
func TestManagerRotatesRunningContainersUnderItsRoot(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	rt := newFakeRuntime()
	big := strings.Repeat("x", 100)
	running, exited := logDir(t, root, "ns_a_1", "running"), logDir(t, root, "ns_a_1", "exited")
	small, foreign := logDir(t, root, "ns_a_1", "small"), logDir(t, elsewhere, "ns_b_2", "foreign")
	for _, p := range []string{running, exited, foreign} {
		appendTo(t, p, big)
	}
	appendTo(t, small, "x")
	rt.add("running", runtimeapi.ContainerState_CONTAINER_RUNNING, running)
	rt.add("exited", runtimeapi.ContainerState_CONTAINER_EXITED, exited)
	rt.add("small", runtimeapi.ContainerState_CONTAINER_RUNNING, small)
	rt.add("foreign", runtimeapi.ContainerState_CONTAINER_RUNNING, foreign)
	rt.add("nolog", runtimeapi.ContainerState_CONTAINER_RUNNING, "")
	m := newTestManager(t, rt, root, Policy{MaxSize: 100, MaxFiles: 2}, clocktesting.NewFakeClock(t0))

	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rt.reopens(); strings.Join(got, ",") != "running" {
		t.Errorf("reopened %v, want only the running container's log", got)
	}
	if got := rotatedIn(t, running); len(got) != 1 || mustRead(t, running) != "" {
		t.Errorf("running container's files: rotated %v, current %q", got, mustRead(t, running))
	}
	for _, p := range []string{exited, small, foreign} {
		if got := rotatedIn(t, p); len(got) != 0 {
			t.Errorf("%s rotated: %v", p, got)
		}
	}
	// Log paths are asked once per container.
	calls := rt.statusCall
	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rt.statusCall != calls {
		t.Errorf("second round asked %d more statuses, want 0", rt.statusCall-calls)
	}
}

// A running container whose log file is gone (deleted, or an agent that
// died between rename and reopen) gets it back.
func TestManagerReopensAMissingLog(t *testing.T) {
	root := t.TempDir()
	rt := newFakeRuntime()
	path := logDir(t, root, "ns_a_1", "c")
	rt.add("c", runtimeapi.ContainerState_CONTAINER_RUNNING, path)
	m := newTestManager(t, rt, root, Policy{MaxSize: 100, MaxFiles: 2}, clocktesting.NewFakeClock(t0))
	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil || len(rt.reopens()) != 1 {
		t.Fatalf("log file after the round: %v; reopened %v", err, rt.reopens())
	}
}

func TestManagerReportsAFailedReopenAndKeepsTheLog(t *testing.T) {
	root := t.TempDir()
	rt := newFakeRuntime()
	rt.reopenErr = errors.New("not running any more")
	path := logDir(t, root, "ns_a_1", "c")
	appendTo(t, path, strings.Repeat("x", 200))
	rt.add("c", runtimeapi.ContainerState_CONTAINER_RUNNING, path)
	m := newTestManager(t, rt, root, Policy{MaxSize: 100, MaxFiles: 2}, clocktesting.NewFakeClock(t0))
	if err := m.RotateOnce(context.Background()); !errors.Is(err, rt.reopenErr) {
		t.Fatalf("RotateOnce = %v, want the reopen error", err)
	}
	if got := rotatedIn(t, path); len(got) != 0 || len(mustRead(t, path)) != 200 {
		t.Fatalf("rotated %v; want the log back in place", got)
	}
}

// Rotated files go with their container; while a container's log path
// cannot be learnt, nothing is removed.
func TestManagerRemovesRotatedLogsOfRemovedContainers(t *testing.T) {
	root := t.TempDir()
	rt := newFakeRuntime()
	keep, gone := logDir(t, root, "ns_a_1", "keep"), logDir(t, root, "ns_a_1", "gone")
	for _, p := range []string{keep, gone} {
		appendTo(t, p, strings.Repeat("x", 200))
	}
	rt.add("keep", runtimeapi.ContainerState_CONTAINER_RUNNING, keep)
	rt.add("gone", runtimeapi.ContainerState_CONTAINER_RUNNING, gone)
	m := newTestManager(t, rt, root, Policy{MaxSize: 100, MaxFiles: 2}, clocktesting.NewFakeClock(t0))
	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rotatedIn(t, keep)) != 1 || len(rotatedIn(t, gone)) != 1 {
		t.Fatalf("want one rotated file each: %v %v", rotatedIn(t, keep), rotatedIn(t, gone))
	}

	rt.remove("gone")
	rt.add("new", runtimeapi.ContainerState_CONTAINER_RUNNING, logDir(t, root, "ns_a_1", "new"))
	rt.statusErr["new"] = errors.New("runtime busy")
	if err := m.RotateOnce(context.Background()); err == nil {
		t.Fatal("want the status error reported")
	}
	if len(rotatedIn(t, gone)) != 1 {
		t.Fatal("rotated files removed while a container's log path was unknown")
	}

	delete(rt.statusErr, "new")
	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rotatedIn(t, gone); len(got) != 0 {
		t.Errorf("removed container's rotated files left: %v", got)
	}
	if got := rotatedIn(t, keep); len(got) != 1 {
		t.Errorf("live container's rotated files: %v", got)
	}
}

func TestManagerRunsOnItsClock(t *testing.T) {
	root := t.TempDir()
	rt := newFakeRuntime()
	path := logDir(t, root, "ns_a_1", "c")
	appendTo(t, path, strings.Repeat("x", 200))
	rt.add("c", runtimeapi.ContainerState_CONTAINER_RUNNING, path)
	clk := clocktesting.NewFakeClock(t0)
	m := newTestManager(t, rt, root, Policy{MaxSize: 100, MaxFiles: 2}, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(30 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("Run never started its ticker")
		}
		time.Sleep(time.Millisecond)
	}
	if len(rt.reopens()) != 0 {
		t.Fatal("rotated before the first interval passed")
	}
	clk.Step(10 * time.Second)
	for len(rt.reopens()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no rotation after an interval")
		}
		time.Sleep(time.Millisecond)
	}
	want := path + "." + t0.Add(10*time.Second).Format(RotationTimeFormat)
	if _, err := os.Stat(want); err != nil {
		t.Errorf("rotated file named by the clock: %v", err)
	}
}

// A follower of a container's log loses nothing while the manager rotates
// it under the writer twice, compressing (and so deleting) the file the
// follower first had open.
func TestFollowContinuesAcrossManagedRotations(t *testing.T) {
	root := t.TempDir()
	rt := newFakeRuntime()
	path := logDir(t, root, "ns_a_1", "c")
	w := newFakeWriter(t, path)
	rt.writers["c"] = w
	rt.add("c", runtimeapi.ContainerState_CONTAINER_RUNNING, path)
	clk := clocktesting.NewFakeClock(t0)
	m := newTestManager(t, rt, root, Policy{MaxSize: 1, MaxFiles: 2}, clk)

	w.write(t, line(0, Stdout, "F", "before"))
	out, stop := startFollow(t, path, Options{})
	want := "before\n"
	waitFor(t, out, want)
	for round := 1; round <= 3; round++ {
		clk.Step(10 * time.Second)
		if err := m.RotateOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprintf("after rotation %d", round)
		w.write(t, line(round, Stdout, "F", msg))
		want += msg + "\n"
		waitFor(t, out, want)
	}
	if got := rotatedIn(t, path); len(got) != 1 {
		t.Errorf("rotated files %v, want 1 (MaxFiles 2)", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestNewManagerChecksItsConfig(t *testing.T) {
	rt := newFakeRuntime()
	for _, cfg := range []ManagerConfig{
		{Root: "/logs", Policy: Policy{MaxSize: 1, MaxFiles: 2}},
		{Runtime: rt, Root: "logs", Policy: Policy{MaxSize: 1, MaxFiles: 2}},
		{Runtime: rt, Root: "/logs", Policy: Policy{MaxSize: 0, MaxFiles: 2}},
		{Runtime: rt, Root: "/logs", Policy: Policy{MaxSize: 1, MaxFiles: 1}},
	} {
		if _, err := NewManager(cfg); err == nil {
			t.Errorf("NewManager(%+v) accepted", cfg)
		}
	}
}

// BenchmarkRotateOnceNothingToDo is the steady cost of a round: 100
// running containers whose logs are under the limit.
func BenchmarkRotateOnceNothingToDo(b *testing.B) {
	root := b.TempDir()
	rt := newFakeRuntime()
	for i := range 100 {
		p := logDir(b, root, fmt.Sprintf("ns_pod%d_%d", i, i), "c")
		if err := os.WriteFile(p, []byte("x"), 0o640); err != nil {
			b.Fatal(err)
		}
		rt.add(fmt.Sprint(i), runtimeapi.ContainerState_CONTAINER_RUNNING, p)
	}
	m, err := NewManager(ManagerConfig{Runtime: rt, Root: root, Policy: Policy{MaxSize: 10 << 20, MaxFiles: 5}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := m.RotateOnce(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
