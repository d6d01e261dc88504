package kuberuntime

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/events/eventstest"
	"github.com/minilet/minilet/internal/lifecycle"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testclock "k8s.io/utils/clock/testing"
)

func newFakeClock() *testclock.FakeClock { return testclock.NewFakeClock(time.Now()) }

// fakeRuntime is cri-api's fake runtime service plus a record of the stop
// timeouts and a hook to make preStop hooks take (fake) time. The real
// runtimes are exercised by the CRI conformance suite and the e2e tests;
// here we test the manager's decisions and what it asks of the runtime.
type fakeRuntime struct {
	*critest.FakeRuntimeService
	mu       sync.Mutex
	timeouts map[string]int64
	onExec   func()
	onStop   func(id string) // runs before a container is stopped
}

func (f *fakeRuntime) StopContainer(ctx context.Context, id string, timeout int64) error {
	if f.onStop != nil {
		f.onStop(id)
	}
	f.mu.Lock()
	f.timeouts[id] = timeout
	f.mu.Unlock()
	return f.FakeRuntimeService.StopContainer(ctx, id, timeout)
}

// RunPodSandbox reports no IP for a sandbox on the host's network, as
// containerd does (the fake gives every sandbox one).
func (f *fakeRuntime) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	id, err := f.FakeRuntimeService.RunPodSandbox(ctx, cfg, handler)
	if err == nil && cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
		f.Lock()
		f.Sandboxes[id].Network = &runtimeapi.PodSandboxNetworkStatus{}
		f.Unlock()
	}
	return id, err
}

func (f *fakeRuntime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	if f.onExec != nil {
		f.onExec()
	}
	return f.FakeRuntimeService.ExecSync(ctx, id, cmd, timeout)
}

func (f *fakeRuntime) timeout(id string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.timeouts[id]
	return t, ok
}

type env struct {
	t      *testing.T
	rt     *fakeRuntime
	images *critest.FakeImageService
	clock  *testclock.FakeClock
	rec    *eventstest.Recorder
	m      *Manager
	cfg    Config
	// planner and probes stand in for the lifecycle core's decisions.
	planner *lifecycle.Planner
	probes  lifecycle.ProbeResults
}

func newEnv(t *testing.T, mutate ...func(*Config)) *env {
	e := &env{t: t, rt: &fakeRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(), timeouts: map[string]int64{}},
		images: critest.NewFakeImageService(), clock: newFakeClock(), rec: &eventstest.Recorder{}}
	dir := t.TempDir()
	e.cfg = Config{Runtime: e.rt, Images: e.images, Recorder: e.rec, Clock: e.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LogRoot: dir + "/logs", PodsDir: dir + "/pods", HostIP: "192.0.2.10"}
	for _, f := range mutate {
		f(&e.cfg)
	}
	e.m = New(e.cfg)
	e.planner = lifecycle.NewPlanner(e.clock, e.rec)
	return e
}

// sync runs one sync of the pod as the lifecycle core does: read the
// runtime's view, plan (the core's decisions, with crash-loop back-off),
// carry the plan out, and report what waits.
func (e *env) sync(pod *v1.Pod) container.SyncResult {
	e.t.Helper()
	ps, err := e.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		e.t.Fatalf("GetPodStatus: %v", err)
	}
	plan := e.planner.Plan(pod, ps, e.probes, nil)
	res := e.m.SyncPod(context.Background(), pod, ps, plan.Actions)
	for name, w := range plan.Waiting {
		res.Wait(name, w.Reason, w.Message)
	}
	res.Requeue(plan.RequeueAfter)
	return res
}

func (e *env) status(pod *v1.Pod) *containerView {
	e.t.Helper()
	ps, err := e.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		e.t.Fatalf("GetPodStatus: %v", err)
	}
	return &containerView{e: e, ps: ps}
}

// exit makes the newest attempt of the named container exit now (fake
// clock) with the code.
func (e *env) exit(pod *v1.Pod, name string, code int32) {
	e.t.Helper()
	c := e.status(pod).ps.FindContainer(name)
	if c == nil {
		e.t.Fatalf("no container %q", name)
	}
	e.rt.Lock()
	defer e.rt.Unlock()
	fc := e.rt.Containers[c.ID.ID]
	fc.State = 2 // CONTAINER_EXITED
	fc.ExitCode = code
	fc.FinishedAt = e.clock.Now().UnixNano()
}

func mkPod(policy v1.RestartPolicy, inits []v1.Container, apps ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"}}
	p.Spec.RestartPolicy = policy
	p.Spec.InitContainers = inits
	for _, n := range apps {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "host"})
	}
	return p
}

func initC(name string, sidecar bool) v1.Container {
	c := v1.Container{Name: name, Image: "host"}
	if sidecar {
		always := v1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
	}
	return c
}
