// Package prober keeps containers healthy with liveness, readiness and
// startup probes, as the kubelet does. The Manager owns one worker per
// (pod, container, probe kind); workers are driven by a single scheduler
// (a timer heap and a bounded set of in-flight probes) instead of one
// goroutine and one ticker each, so that ten thousand probes stay cheap.
// Results are reported to the sync loop through Updates and read back with
// LivenessFailed, StartupFailed and UpdatePodStatus.
package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/prober/probe/exec"
	httpprobe "github.com/minilet/minilet/internal/prober/probe/http"
)

// Kind is a probe kind: liveness, readiness or startup.
type Kind int

// The probe kinds.
const (
	Liveness Kind = iota
	Readiness
	Startup
	numKinds
)

// String returns the kind as the kubelet writes it in events and metrics.
func (k Kind) String() string {
	switch k {
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	case Startup:
		return "Startup"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Result is a container's probe result as the rest of the agent sees it.
type Result int

// The results.
const (
	Unknown Result = iota
	Success
	Failure
)

// String returns the result's name.
func (r Result) String() string {
	switch r {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	}
	return "Unknown"
}

// Update tells the sync loop that a container's result for one probe kind
// changed. Readiness and startup updates change the pod's status; a
// liveness or startup Failure means the pod must be synced so the runtime
// kills and restarts the container.
type Update struct {
	PodUID        types.UID
	ContainerName string
	ContainerID   string
	Kind          Kind
	Result        Result
}

// StatusProvider gives the latest pod status the agent knows: container
// IDs, running state and start times, the pod IP and phase.
type StatusProvider interface {
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
}

// Config holds the Manager's dependencies and knobs.
type Config struct {
	// Status provides pod status; required.
	Status StatusProvider
	// Execer runs exec probes; required only if a pod has an exec probe
	// (such a probe errors without it).
	Execer exec.Execer
	// Recorder receives Unhealthy and ProbeWarning events; default events.Nop.
	Recorder events.Recorder
	// Clock drives schedules and initial delays; default the real clock.
	Clock clock.Clock
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer, when set, gets prober_probe_total and
	// prober_probe_duration_seconds.
	Registerer prometheus.Registerer
	// MaxInFlight bounds how many probes run at once; default 1024.
	MaxInFlight int
	// LastReadiness, when set, tells whether a container was ready before
	// the agent restarted; such a container stays ready until its probe
	// says otherwise (no readiness storm on restart). Optional.
	LastReadiness func(containerID string) bool
	// LastStarted, when set, tells whether a container had passed its
	// startup probe before the agent restarted: it counts as started
	// (and may be ready) until a probe says otherwise.
	LastStarted func(containerID string) bool
	// ObserveLateness, when set, gets how late each probe started against
	// its schedule; for benchmarks. Optional.
	ObserveLateness func(time.Duration)
}

type probeKey struct {
	podUID    types.UID
	container string
	kind      Kind
}

// Manager runs probes for pods. Create it with NewManager, Start it once,
// and Stop it on shutdown.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	clock   clock.Clock
	start   time.Time
	http    *httpprobe.Prober
	metrics *metrics
	sched   *scheduler
	updates *updateQueue

	mu      sync.Mutex
	workers map[probeKey]*worker
	results [numKinds]map[string]Result // container ID → result

	startOnce sync.Once
	stopOnce  sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

// NewManager checks cfg and returns a Manager that is not yet running.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Status == nil {
		return nil, fmt.Errorf("prober config: Status is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.MaxInFlight < 0 {
		return nil, fmt.Errorf("prober config: MaxInFlight %d must not be negative: %w", cfg.MaxInFlight, errdefs.ErrInvalidArgument)
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 1024
	}
	if cfg.Recorder == nil {
		cfg.Recorder = events.Nop{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Manager{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "prober"),
		clock:   cfg.Clock,
		start:   cfg.Clock.Now(),
		http:    httpprobe.New(),
		updates: newUpdateQueue(),
		workers: map[probeKey]*worker{},
		done:    make(chan struct{}),
	}
	for k := range m.results {
		m.results[k] = map[string]Result{}
	}
	if cfg.Registerer != nil {
		met, err := newMetrics(cfg.Registerer)
		if err != nil {
			return nil, err
		}
		m.metrics = met
	}
	m.sched = newScheduler(cfg.Clock, cfg.MaxInFlight, m.doProbe, m.workerExited, cfg.ObserveLateness)
	return m, nil
}

// Start runs the scheduler and the update stream until ctx ends or Stop is
// called. Pods may be added before Start; their probes wait for it.
func (m *Manager) Start(ctx context.Context) {
	m.startOnce.Do(func() {
		ctx, m.cancel = context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); m.sched.loop(ctx) }()
		go func() { defer wg.Done(); m.updates.run(ctx) }()
		go func() { wg.Wait(); close(m.done) }()
	})
}

// Stop ends the scheduler and waits for probes in flight. It is idempotent
// and returns at once if Start was never called.
func (m *Manager) Stop() {
	m.startOnce.Do(func() { close(m.done) })
	m.stopOnce.Do(func() {
		if m.cancel != nil {
			m.cancel()
		}
	})
	<-m.done
}

// Updates streams result changes to the sync loop. Nothing is dropped: the
// stream queues while the consumer is busy.
func (m *Manager) Updates() <-chan Update { return m.updates.out }

// Get returns the current result of the kind of probe for a container, and
// whether there is one.
func (m *Manager) Get(kind Kind, containerID string) (Result, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.results[kind][containerID]
	return r, ok
}

// LivenessFailed reports whether the container's liveness probe has
// failed, so the runtime must kill and restart it.
func (m *Manager) LivenessFailed(id container.ID) bool {
	r, ok := m.Get(Liveness, id.String())
	return ok && r == Failure
}

// StartupFailed reports whether the container's startup probe has failed,
// so the runtime must kill and restart it.
func (m *Manager) StartupFailed(id container.ID) bool {
	r, ok := m.Get(Startup, id.String())
	return ok && r == Failure
}

// StartupSucceeded reports whether the container's startup probe has
// succeeded (in this run, or before the agent restarted), so the
// containers after a sidecar may start.
func (m *Manager) StartupSucceeded(id container.ID) bool {
	r, ok := m.Get(Startup, id.String())
	if ok {
		return r == Success
	}
	return m.cfg.LastStarted != nil && m.cfg.LastStarted(id.String())
}

// setResult publishes w's result for containerID and queues an Update if
// it changed. A stopped worker publishes nothing.
func (m *Manager) setResult(w *worker, containerID string, r Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.stopped {
		return
	}
	res := m.results[w.kind]
	if w.publishedID != "" && w.publishedID != containerID {
		delete(res, w.publishedID)
	}
	w.publishedID = containerID
	if prev, ok := res[containerID]; ok && prev == r {
		return
	}
	res[containerID] = r
	m.updates.push(Update{PodUID: w.pod.UID, ContainerName: w.container.Name, ContainerID: containerID, Kind: w.kind, Result: r})
}

// markProbed records that w has run a real probe against containerID.
func (m *Manager) markProbed(w *worker, containerID string) {
	m.mu.Lock()
	w.probedID = containerID
	m.mu.Unlock()
}

// workerExited is called by the scheduler when doProbe says the worker is
// done (the pod finished, or liveness/startup stopped for a deleted pod).
func (m *Manager) workerExited(w *worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopWorkerLocked(w)
}

// stopWorkerLocked forgets w and its result; m.mu must be held.
func (m *Manager) stopWorkerLocked(w *worker) {
	if w.stopped {
		return
	}
	w.stopped = true
	if m.workers[w.key] == w {
		delete(m.workers, w.key)
	}
	if w.publishedID != "" {
		delete(m.results[w.kind], w.publishedID)
	}
	m.metrics.forget(w)
	m.sched.cancel(w)
}

var errNoHandler = errors.New("probe has no handler")
