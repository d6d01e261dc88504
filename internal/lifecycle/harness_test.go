package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/events/eventstest"
	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/podworkers"
)

// The core is driven here the way etcd's raft is: every input is one
// method call (a snapshot, an event, a housekeeping tick, one worker step)
// and every output lands in a fake that the test reads. Nothing runs in
// the background and the clock only moves when a test steps it.

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// fakeRuntime is a container runtime held in memory: SyncPod carries out
// the actions it is given the way the runtime manager does (new
// containers run at once, killed ones exit 137), and tests make
// containers exit with exit().
type fakeRuntime struct {
	clk  *testclock.FakeClock
	pods map[types.UID]*container.PodStatus
	next int
	// What the core asked for.
	actions []container.PodActions
	kills   []killCall
	gcRuns  int
	// resources, when set, gives each started container the resources
	// the runtime reports applied (an in-place resize compares them).
	resources func(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources
}

type killCall struct {
	uid   types.UID
	grace *int64
}

func newFakeRuntime(clk *testclock.FakeClock) *fakeRuntime {
	return &fakeRuntime{clk: clk, pods: map[types.UID]*container.PodStatus{}}
}

func (r *fakeRuntime) pod(uid types.UID) *container.PodStatus {
	ps, ok := r.pods[uid]
	if !ok {
		ps = &container.PodStatus{UID: uid}
		r.pods[uid] = ps
	}
	return ps
}

func (r *fakeRuntime) GetPodStatus(_ context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error) {
	ps, ok := r.pods[uid]
	if !ok {
		return &container.PodStatus{UID: uid, Name: name, Namespace: namespace}, nil
	}
	cp := *ps
	cp.Name, cp.Namespace = name, namespace
	cp.Sandboxes = make([]*container.SandboxStatus, len(ps.Sandboxes))
	for i, sb := range ps.Sandboxes {
		c := *sb
		cp.Sandboxes[i] = &c
	}
	cp.Containers = make([]*container.ContainerStatus, len(ps.Containers))
	for i, c := range ps.Containers {
		cc := *c
		cp.Containers[i] = &cc
	}
	return &cp, nil
}

func (r *fakeRuntime) SyncPod(_ context.Context, pod *v1.Pod, _ *container.PodStatus, acts container.PodActions) container.SyncResult {
	r.actions = append(r.actions, acts)
	ps := r.pod(pod.UID)
	if acts.KillPod {
		r.stopAll(ps)
		if !acts.CreateSandbox {
			return container.SyncResult{}
		}
	}
	for _, k := range acts.ContainersToKill {
		for _, c := range ps.Containers {
			if c.ID == k.ID && c.State == container.StateRunning {
				r.exitContainer(c, 137)
			}
		}
	}
	if acts.CreateSandbox {
		r.next++
		ps.Sandboxes = append(ps.Sandboxes, &container.SandboxStatus{ID: fmt.Sprintf("sb%d", r.next),
			State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: r.clk.Now(), Attempt: acts.Attempt, IP: "10.0.0.9"})
	}
	for _, i := range acts.InitContainersToStart {
		r.start(ps, &pod.Spec.InitContainers[i])
	}
	for _, i := range acts.ContainersToStart {
		r.start(ps, &pod.Spec.Containers[i])
		if r.resources != nil {
			ps.Containers[0].Resources = r.resources(pod, &pod.Spec.Containers[i])
		}
	}
	return container.SyncResult{}
}

func (r *fakeRuntime) start(ps *container.PodStatus, c *v1.Container) {
	restarts := 0
	if prev := ps.FindContainer(c.Name); prev != nil {
		restarts = prev.RestartCount + 1
	}
	r.next++
	now := r.clk.Now()
	ps.Containers = append([]*container.ContainerStatus{{
		ID: container.ID{Type: "fake", ID: fmt.Sprintf("%s-%d", c.Name, r.next)}, Name: c.Name,
		State: container.StateRunning, CreatedAt: now, StartedAt: now, Hash: container.Hash(c),
		RestartCount: restarts, Image: c.Image, ImageRef: "sha256:" + c.Image,
	}}, ps.Containers...)
}

func (r *fakeRuntime) exitContainer(c *container.ContainerStatus, code int32) {
	c.State, c.ExitCode, c.FinishedAt = container.StateExited, code, r.clk.Now()
}

func (r *fakeRuntime) stopAll(ps *container.PodStatus) {
	for _, c := range ps.Containers {
		if c.State == container.StateRunning {
			r.exitContainer(c, 137)
		}
	}
	for _, sb := range ps.Sandboxes {
		sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
}

func (r *fakeRuntime) KillPod(_ context.Context, pod *v1.Pod, _ *container.PodStatus, grace *int64) error {
	r.kills = append(r.kills, killCall{uid: pod.UID, grace: grace})
	r.stopAll(r.pod(pod.UID))
	return nil
}

func (r *fakeRuntime) GetPods(context.Context) ([]*container.Pod, error) {
	var out []*container.Pod
	for uid, ps := range r.pods {
		out = append(out, &container.Pod{UID: uid, Name: ps.Name, Namespace: ps.Namespace, Sandboxes: ps.Sandboxes, Containers: ps.Containers})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out, nil
}

func (r *fakeRuntime) GarbageCollect(context.Context, int, func(types.UID) bool) error {
	r.gcRuns++
	return nil
}

// exit makes the newest attempt of a container exit now.
func (r *fakeRuntime) exit(t *testing.T, uid types.UID, name string, code int32) {
	t.Helper()
	c := r.pod(uid).FindContainer(name)
	if c == nil || c.State != container.StateRunning {
		t.Fatalf("container %s of pod %s is not running: %+v", name, uid, c)
	}
	r.exitContainer(c, code)
}

// attempts counts the containers of a name the runtime holds.
func (r *fakeRuntime) attempts(uid types.UID, name string) int {
	n := 0
	for _, c := range r.pod(uid).Containers {
		if c.Name == name {
			n++
		}
	}
	return n
}

// fakeWorkers is a synchronous stand-in for internal/podworkers: it
// records what the loop asks and, when the test calls step, runs each
// pod's pending step through the Syncer in the order the real workers
// would (sync; terminating once killed; terminated).
type fakeWorkers struct {
	syncer  *Syncer
	order   []types.UID
	workers map[types.UID]*fakeWorker
	calls   []string
}

type fakeWorker struct {
	pod     *v1.Pod
	phase   podworkers.Phase
	kill    bool
	grace   *int64
	pending bool
	cleaned bool
	requeue time.Duration
	lastErr error
}

func newFakeWorkers() *fakeWorkers { return &fakeWorkers{workers: map[types.UID]*fakeWorker{}} }

func (w *fakeWorkers) get(pod *v1.Pod) *fakeWorker {
	wk, ok := w.workers[pod.UID]
	if !ok {
		wk = &fakeWorker{}
		w.workers[pod.UID] = wk
		w.order = append(w.order, pod.UID)
	}
	return wk
}

func (w *fakeWorkers) UpdatePod(pod *v1.Pod) {
	w.calls = append(w.calls, "update "+pod.Name)
	wk := w.get(pod)
	wk.pod, wk.pending = pod, true
}

func (w *fakeWorkers) KillPod(pod *v1.Pod, grace *int64) {
	w.calls = append(w.calls, "kill "+pod.Name)
	wk := w.get(pod)
	wk.pod, wk.pending, wk.kill = pod, true, true
	if grace != nil {
		wk.grace = grace
	}
}

func (w *fakeWorkers) Resync(uid types.UID) {
	if wk, ok := w.workers[uid]; ok {
		wk.pending = true
	}
}

func (w *fakeWorkers) Known() map[types.UID]podworkers.Phase {
	out := map[types.UID]podworkers.Phase{}
	for uid, wk := range w.workers {
		out[uid] = wk.phase
	}
	return out
}

func (w *fakeWorkers) Forget(uid types.UID) bool {
	wk, ok := w.workers[uid]
	if !ok {
		return true
	}
	if wk.phase != podworkers.Terminated || !wk.cleaned {
		return false
	}
	delete(w.workers, uid)
	w.order = slices.DeleteFunc(w.order, func(u types.UID) bool { return u == uid })
	return true
}

// step runs every pending worker until none is pending (a worker moving
// to its next phase runs that phase too, as the real workers do).
func (w *fakeWorkers) step(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for progress := true; progress; {
		progress = false
		for _, uid := range slices.Clone(w.order) {
			wk := w.workers[uid]
			if wk == nil || !wk.pending {
				continue
			}
			progress = true
			wk.pending = false
			if wk.phase == podworkers.Syncing && wk.kill {
				wk.phase = podworkers.Terminating
			}
			switch wk.phase {
			case podworkers.Syncing:
				terminal, requeue, err := w.syncer.SyncPod(ctx, wk.pod)
				wk.requeue, wk.lastErr = requeue, err
				if terminal {
					wk.phase, wk.pending = podworkers.Terminating, true
				}
			case podworkers.Terminating:
				if err := w.syncer.SyncTerminatingPod(ctx, wk.pod, wk.grace); err != nil {
					t.Fatalf("SyncTerminatingPod(%s): %v", wk.pod.Name, err)
				}
				wk.phase, wk.pending = podworkers.Terminated, true
			case podworkers.Terminated:
				if !wk.cleaned {
					if err := w.syncer.SyncTerminatedPod(ctx, wk.pod); err != nil {
						t.Fatalf("SyncTerminatedPod(%s): %v", wk.pod.Name, err)
					}
					wk.cleaned = true
				}
			}
		}
	}
}

// fakeCgroups records pod cgroups.
type fakeCgroups struct {
	ensured, removed []types.UID
	orphanRuns       int
	failEnsure       error
}

func (c *fakeCgroups) EnsurePod(pod *v1.Pod) error {
	c.ensured = append(c.ensured, pod.UID)
	return c.failEnsure
}
func (c *fakeCgroups) RemovePod(_ context.Context, uid types.UID) error {
	c.removed = append(c.removed, uid)
	return nil
}
func (c *fakeCgroups) CleanupOrphans(context.Context, map[types.UID]bool) error {
	c.orphanRuns++
	return nil
}

// fakeProber: tests mark containers' liveness or readiness.
type fakeProber struct {
	livenessFailed map[container.ID]bool
	started        map[container.ID]bool // startup probe succeeded
	notReady       map[string]bool       // container name
	added, removed []types.UID
	stopped        []types.UID
	cleanups       []map[types.UID]struct{}
}

func newFakeProber() *fakeProber {
	return &fakeProber{livenessFailed: map[container.ID]bool{}, started: map[container.ID]bool{}, notReady: map[string]bool{}}
}

func (p *fakeProber) AddPod(pod *v1.Pod) error {
	p.added = append(p.added, pod.UID)
	return nil
}
func (p *fakeProber) StopLivenessAndStartup(pod *v1.Pod)    { p.stopped = append(p.stopped, pod.UID) }
func (p *fakeProber) RemovePod(pod *v1.Pod)                 { p.removed = append(p.removed, pod.UID) }
func (p *fakeProber) LivenessFailed(id container.ID) bool   { return p.livenessFailed[id] }
func (p *fakeProber) StartupFailed(container.ID) bool       { return false }
func (p *fakeProber) StartupSucceeded(id container.ID) bool { return p.started[id] }
func (p *fakeProber) CleanupPods(d map[types.UID]struct{})  { p.cleanups = append(p.cleanups, d) }
func (p *fakeProber) UpdatePodStatus(_ *v1.Pod, s *v1.PodStatus) {
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		running := cs.State.Running != nil
		cs.Ready = running && !p.notReady[cs.Name]
		cs.Started = &running
	}
}

// fakeAdmitter admits unless it is told a reason; as a Releaser it
// records what it let go of.
type fakeAdmitter struct {
	name     string
	reject   map[string]string // pod name -> reason
	admitted []string
	released []types.UID
	seen     [][]string // the active pods at each call
}

func (a *fakeAdmitter) Admit(_ context.Context, pod *v1.Pod, active []*v1.Pod) (bool, string, string) {
	var names []string
	for _, p := range active {
		names = append(names, p.Name)
	}
	a.seen = append(a.seen, names)
	if reason, ok := a.reject[pod.Name]; ok {
		return false, reason, fmt.Sprintf("%s by %s", reason, a.name)
	}
	a.admitted = append(a.admitted, pod.Name)
	return true, "", ""
}

func (a *fakeAdmitter) Release(uid types.UID) { a.released = append(a.released, uid) }

// fakePublisher records what the cluster would be told.
type fakePublisher struct {
	statuses map[string]v1.PodStatus
	gone     []string
	cleanups int
}

func (p *fakePublisher) PublishStatus(_ context.Context, pod *v1.Pod, st v1.PodStatus) {
	if p.statuses == nil {
		p.statuses = map[string]v1.PodStatus{}
	}
	p.statuses[pod.Name] = st
}
func (p *fakePublisher) PodGone(_ context.Context, pod *v1.Pod)    { p.gone = append(p.gone, pod.Name) }
func (p *fakePublisher) CleanupMirrors(context.Context, []*v1.Pod) { p.cleanups++ }

// memStore is a StatusStore in memory: it survives a "restart" when the
// test hands it to a new harness.
type memStore struct {
	mu    sync.Mutex
	saved map[types.UID]v1.PodStatus
}

func newMemStore() *memStore { return &memStore{saved: map[types.UID]v1.PodStatus{}} }

func (s *memStore) Save(uid types.UID, st v1.PodStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saved[uid] = st
}
func (s *memStore) Remove(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.saved, uid)
}
func (s *memStore) Restored(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.saved[uid]
	return st, ok
}

// fakeMetrics keeps the last counts and the start latencies.
type fakeMetrics struct {
	starts  []time.Duration
	running int
	counted map[string]int
	syncOps []string
}

func (m *fakeMetrics) ObserveSync(op string, _ time.Duration) { m.syncOps = append(m.syncOps, op) }
func (m *fakeMetrics) ObservePodStart(d time.Duration)        { m.starts = append(m.starts, d) }
func (m *fakeMetrics) SetCounts(running int, c map[string]int) {
	m.running, m.counted = running, c
}

// harness is one agent's core over fakes.
type harness struct {
	t         *testing.T
	clk       *testclock.FakeClock
	rt        *fakeRuntime
	workers   *fakeWorkers
	cgroups   *fakeCgroups
	prober    *fakeProber
	admitters []*fakeAdmitter
	publisher *fakePublisher
	store     *memStore
	rec       *eventstest.Recorder
	metrics   *fakeMetrics
	pods      *Pods
	syncer    *Syncer
	loop      *Loop
	volumes   Volumes       // nil unless an option sets it
	resize    *ResizeConfig // nil unless an option sets it
}

type harnessOption func(*harness, *LoopConfig)

// withSources sets the pod sources the loop waits for (default: file).
func withSources(s ...string) harnessOption {
	return func(_ *harness, c *LoopConfig) { c.Sources = s }
}

// restartedFrom builds the harness as an agent restarted over what h
// left: the same runtime, clock and saved statuses.
func restartedFrom(prev *harness) harnessOption {
	return func(h *harness, _ *LoopConfig) {
		h.clk, h.rt, h.store = prev.clk, prev.rt, prev.store
	}
}

func newHarness(t *testing.T, opts ...harnessOption) *harness {
	t.Helper()
	clk := testclock.NewFakeClock(t0)
	h := &harness{
		t: t, clk: clk, rt: newFakeRuntime(clk), workers: newFakeWorkers(), cgroups: &fakeCgroups{},
		prober: newFakeProber(), publisher: &fakePublisher{}, store: newMemStore(), rec: &eventstest.Recorder{},
		metrics: &fakeMetrics{},
		admitters: []*fakeAdmitter{
			{name: "devices", reject: map[string]string{}},
			{name: "resources", reject: map[string]string{}},
		},
	}
	lc := LoopConfig{Sources: []string{podspec.SourceFile}}
	for _, o := range opts {
		o(h, &lc)
	}
	h.pods = NewPods(h.store)
	var err error
	h.syncer, err = NewSyncer(SyncerConfig{
		Pods: h.pods, Runtime: h.rt, Cgroups: h.cgroups, Prober: h.prober, Publisher: h.publisher,
		HostIP: "192.0.2.1", Recorder: h.rec, Clock: h.clk, Metrics: h.metrics, Volumes: h.volumes,
		Resize: h.resize,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.workers.syncer = h.syncer
	lc.Pods, lc.Workers, lc.Runtime, lc.Prober, lc.Cgroups = h.pods, h.workers, h.rt, h.prober, h.cgroups
	lc.Devices, lc.Publisher, lc.Recorder, lc.Clock, lc.Metrics = noDevices{}, h.publisher, h.rec, h.clk, h.metrics
	for _, a := range h.admitters {
		lc.Admitters = append(lc.Admitters, a)
	}
	if h.loop, err = NewLoop(lc); err != nil {
		t.Fatal(err)
	}
	return h
}

type noDevices struct{}

func (noDevices) UpdateAllocatedDevices([]*v1.Pod) {}

// snapshot sends the pods as source's full set, then runs the workers.
func (h *harness) snapshot(source string, pods ...*v1.Pod) {
	h.t.Helper()
	h.loop.HandleSnapshot(context.Background(), Snapshot{Source: source, Pods: pods})
	h.workers.step(h.t)
}

// event reports a runtime or probe change of pod, then runs the workers.
func (h *harness) event(pod *v1.Pod) {
	h.t.Helper()
	h.loop.HandleEvent(pod.UID)
	h.workers.step(h.t)
}

// housekeep runs one housekeeping tick, then the workers.
func (h *harness) housekeep() {
	h.t.Helper()
	h.loop.Housekeeping(context.Background())
	h.workers.step(h.t)
}

// status is the pod's status as the API shows it.
func (h *harness) status(pod *v1.Pod) v1.PodStatus {
	h.t.Helper()
	st, ok := h.pods.GetPodStatus(pod.UID)
	if !ok {
		h.t.Fatalf("no status for pod %s", pod.Name)
	}
	return st
}

// waiting is the waiting reason of a container in the pod's status.
func (h *harness) waiting(pod *v1.Pod, name string) string {
	for _, cs := range h.status(pod).ContainerStatuses {
		if cs.Name == name && cs.State.Waiting != nil {
			return cs.State.Waiting.Reason
		}
	}
	return ""
}

// filePod is a static pod from the manifest folder, with containers named
// apps (image "host").
func filePod(uid, name string, policy v1.RestartPolicy, apps ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "default",
		CreationTimestamp: metav1.NewTime(t0),
		Annotations:       map[string]string{podspec.AnnotationConfigSource: podspec.SourceFile}}}
	p.Spec.RestartPolicy = policy
	for _, a := range apps {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: a, Image: "host"})
	}
	return p
}

// apiPod is a pod from the API server.
func apiPod(uid, name string, apps ...string) *v1.Pod {
	p := filePod(uid, name, v1.RestartPolicyAlways, apps...)
	p.Annotations[podspec.AnnotationConfigSource] = "api"
	return p
}
