// Package podworkers runs one serial worker per pod. A worker walks its pod
// through three phases — syncing, terminating, terminated — and never runs
// two steps of the same pod at once. Updates that arrive while a step runs
// are coalesced: the worker only ever acts on the newest spec.
//
// The worker does not decide what to do with containers; it calls the
// Syncer (the agent), which does. What the worker owns is ordering:
//   - a pod that is being killed never goes back to syncing;
//   - a pod whose phase became terminal stops being synced;
//   - a new pod with the same full name as one still terminating (a static
//     pod whose manifest changed gets a new UID) waits until the old one has
//     terminated, so two copies of the same pod never run together.
package podworkers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Syncer performs the steps of a pod's life. The worker calls one step at a
// time for a pod.
type Syncer interface {
	// SyncPod makes the runtime match the spec; ctx ends early when the
	// pod is killed meanwhile. It reports whether the pod
	// reached a terminal phase (Succeeded or Failed) and, when something
	// must be retried (a back-off, an error), how soon.
	SyncPod(ctx context.Context, pod *v1.Pod) (terminal bool, requeueAfter time.Duration, err error)
	// SyncTerminatingPod stops every container of the pod, giving them
	// gracePeriod seconds (nil: the pod's own); ctx ends early when a
	// shorter grace period arrives, and the step is run again with it.
	SyncTerminatingPod(ctx context.Context, pod *v1.Pod, gracePeriod *int64) error
	// SyncTerminatedPod releases what the pod held once nothing runs
	// (cgroups, devices, probe workers).
	SyncTerminatedPod(ctx context.Context, pod *v1.Pod) error
}

// Phase is where a worker is in a pod's life.
type Phase int

// The phases, in the only order a worker moves through them.
const (
	Syncing Phase = iota
	Terminating
	Terminated
)

func (p Phase) String() string {
	switch p {
	case Syncing:
		return "syncing"
	case Terminating:
		return "terminating"
	default:
		return "terminated"
	}
}

// Config configures the workers.
type Config struct {
	Syncer Syncer
	Clock  clock.WithDelayedExecution
	Logger *slog.Logger
	// ResyncInterval is how often a healthy pod is synced again with no
	// other reason (the kubelet's syncFrequency, default 1m).
	ResyncInterval time.Duration
	// RetryInterval is the delay after a failed step (default 1s).
	RetryInterval time.Duration
	// OnTerminated, when set, is called (on the worker's goroutine, with
	// no lock held) once a pod has fully terminated, so its owner can
	// forget it at once instead of at its next housekeeping.
	OnTerminated func(uid types.UID)
}

// Workers holds the pod workers.
type Workers struct {
	cfg Config
	ctx context.Context

	mu      sync.Mutex
	workers map[types.UID]*worker
	wg      sync.WaitGroup
}

type worker struct {
	uid      types.UID
	fullName string

	// Guarded by Workers.mu.
	pod         *v1.Pod
	phase       Phase
	kill        bool
	gracePeriod *int64
	pending     bool
	wake        chan struct{} // capacity 1
	timer       clock.Timer
	done        chan struct{} // closed once terminated
	waitFor     *worker       // an older namesake to wait for
	cleaned     bool          // SyncTerminatedPod succeeded; only the worker goroutine touches it before done closes
	// cancel ends the step in progress (nil when none runs); a kill
	// cancels a sync, and a shorter grace period a termination, so
	// neither waits for a slow step (an image pull, a long preStop).
	cancel context.CancelFunc
}

// New creates the workers; they run until ctx ends.
func New(ctx context.Context, cfg Config) *Workers {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = time.Minute
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	return &Workers{cfg: cfg, ctx: ctx, workers: map[types.UID]*worker{}}
}

// FullName is the name the kubelet uses to tell pods apart across UIDs.
func FullName(pod *v1.Pod) string { return pod.Name + "_" + pod.Namespace }

// UpdatePod hands the worker of pod.UID a new spec to sync, starting the
// worker if needed. A pod whose worker is terminating or terminated keeps
// its phase; only its spec is refreshed.
func (w *Workers) UpdatePod(pod *v1.Pod) { w.update(pod, false, nil) }

// KillPod asks the worker to terminate the pod, with gracePeriod seconds
// (nil: the pod's terminationGracePeriodSeconds).
func (w *Workers) KillPod(pod *v1.Pod, gracePeriod *int64) { w.update(pod, true, gracePeriod) }

// Resync asks the worker of uid to run its current step again now.
func (w *Workers) Resync(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wk, ok := w.workers[uid]; ok {
		w.pokeLocked(wk)
	}
}

func (w *Workers) update(pod *v1.Pod, kill bool, gracePeriod *int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wk, ok := w.workers[pod.UID]
	if !ok {
		if w.ctx.Err() != nil {
			return
		}
		wk = &worker{
			uid:      pod.UID,
			fullName: FullName(pod),
			wake:     make(chan struct{}, 1),
			done:     make(chan struct{}),
		}
		for _, other := range w.workers {
			if other.fullName == wk.fullName && other.phase != Terminated {
				wk.waitFor = other
			}
		}
		w.workers[pod.UID] = wk
		w.wg.Add(1)
		go w.run(wk)
	}
	wk.pod = pod
	switch {
	case kill && !wk.kill:
		wk.kill = true
		wk.gracePeriod = gracePeriod
		if wk.phase == Syncing && wk.cancel != nil {
			wk.cancel() // do not finish a sync of a pod being killed
		}
	case kill && gracePeriod != nil && (wk.gracePeriod == nil || *gracePeriod < *wk.gracePeriod):
		// A shorter grace period cuts a running termination short: the
		// termination starts over with it at once.
		wk.gracePeriod = gracePeriod
		if wk.phase == Terminating && wk.cancel != nil {
			wk.cancel()
		}
	}
	w.pokeLocked(wk)
}

func (w *Workers) pokeLocked(wk *worker) {
	wk.pending = true
	select {
	case wk.wake <- struct{}{}:
	default:
	}
}

// Phase returns the phase of the worker of uid and whether it exists.
func (w *Workers) Phase(uid types.UID) (Phase, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wk, ok := w.workers[uid]
	if !ok {
		return 0, false
	}
	return wk.phase, true
}

// Known returns every UID that has a worker, with its phase.
func (w *Workers) Known() map[types.UID]Phase {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[types.UID]Phase, len(w.workers))
	for uid, wk := range w.workers {
		out[uid] = wk.phase
	}
	return out
}

// Forget drops the worker of a terminated pod. It reports false (and keeps
// the worker) when the pod has not terminated yet, or its cleanup
// (SyncTerminatedPod) has not succeeded yet: dropping it earlier would end
// the cleanup retries and leave a namesake waiting for it forever.
func (w *Workers) Forget(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wk, ok := w.workers[uid]
	if !ok {
		return true
	}
	if wk.phase != Terminated {
		return false
	}
	select {
	case <-wk.done:
	default:
		return false
	}
	if wk.timer != nil {
		wk.timer.Stop()
	}
	delete(w.workers, uid)
	close(wk.wake) // ends the goroutine
	return true
}

// Wait blocks until every worker goroutine has returned (after ctx ends).
func (w *Workers) Wait() { w.wg.Wait() }

func (w *Workers) run(wk *worker) {
	defer w.wg.Done()
	if wk.waitFor != nil {
		select {
		case <-wk.waitFor.done:
		case <-w.ctx.Done():
			return
		}
	}
	for {
		select {
		case <-w.ctx.Done():
			return
		case _, ok := <-wk.wake:
			if !ok {
				return
			}
		}
		w.step(wk)
	}
}

// step runs the worker's current phase once.
func (w *Workers) step(wk *worker) {
	w.mu.Lock()
	if !wk.pending {
		w.mu.Unlock()
		return
	}
	wk.pending = false
	if wk.timer != nil {
		wk.timer.Stop()
		wk.timer = nil
	}
	if wk.phase == Syncing && wk.kill {
		wk.phase = Terminating
	}
	pod, phase, grace := wk.pod, wk.phase, wk.gracePeriod
	if phase == Terminated && wk.cleaned {
		w.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	wk.cancel = cancel
	w.mu.Unlock()

	next, retry := w.runPhase(ctx, pod, phase, grace)

	w.mu.Lock()
	terminated := false
	defer func() {
		w.mu.Unlock()
		if terminated && w.cfg.OnTerminated != nil {
			w.cfg.OnTerminated(wk.uid)
		}
	}()
	wk.cancel = nil
	cancelled := ctx.Err() != nil
	cancel()
	if w.ctx.Err() != nil {
		return
	}
	if cancelled && next == phase {
		// Cancelled by a kill or a shorter grace period, which also
		// poked the worker: the next step runs at once.
		return
	}
	if next != phase {
		wk.phase = next
		w.pokeLocked(wk)
		return
	}
	if phase == Terminated && retry == 0 {
		wk.cleaned = true
		close(wk.done)
		terminated = true
		return
	}
	if retry > 0 && !wk.pending {
		uid := wk.uid
		wk.timer = w.cfg.Clock.AfterFunc(retry, func() { w.Resync(uid) })
	}
}

// runPhase calls the Syncer for one phase and returns the phase to move to
// and, when staying, how long until the step runs again (0: not by timer).
func (w *Workers) runPhase(ctx context.Context, pod *v1.Pod, phase Phase, grace *int64) (Phase, time.Duration) {
	log := w.cfg.Logger.With("pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "phase", phase.String())
	switch phase {
	case Syncing:
		terminal, requeue, err := w.cfg.Syncer.SyncPod(ctx, pod)
		switch {
		case err != nil && ctx.Err() != nil:
			return phase, w.cfg.RetryInterval // cancelled, not failed
		case err != nil:
			log.Warn("sync failed, will retry", "err", err)
			// A failure that also asks for a later sync (a container that
			// cannot be created waits out its back-off) is not retried
			// sooner than asked, so it does not spin every RetryInterval.
			return phase, max(w.cfg.RetryInterval, requeue)
		case terminal:
			return Terminating, 0
		case requeue > 0:
			// A later wish (a far deadline, a long back-off) never
			// delays the periodic resync.
			return phase, min(requeue, w.cfg.ResyncInterval)
		default:
			return phase, w.cfg.ResyncInterval
		}
	case Terminating:
		if err := w.cfg.Syncer.SyncTerminatingPod(ctx, pod, grace); err != nil {
			if ctx.Err() == nil {
				log.Warn("terminating failed, will retry", "err", err)
			}
			return phase, w.cfg.RetryInterval
		}
		return Terminated, 0
	default:
		if err := w.cfg.Syncer.SyncTerminatedPod(ctx, pod); err != nil {
			log.Warn("cleanup of terminated pod failed, will retry", "err", err)
			return phase, w.cfg.RetryInterval
		}
		return phase, 0
	}
}
