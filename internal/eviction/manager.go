// Package eviction watches the node's memory, disk and process IDs and,
// when an eviction threshold is met, reports pressure conditions, frees
// node-level resources (dead containers, unused images) and, if that is
// not enough, evicts one pod at a time, ranked the way the kubelet ranks
// them. It also refuses new pods under pressure, like the kubelet's
// eviction admission handler, and evicts pods whose disk emptyDir
// volumes outgrow their sizeLimit.
package eviction

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/status"
)

// Reason is the pod status reason and event reason of an eviction, and
// the admission rejection reason under pressure.
const Reason = "Evicted"

// immediateGracePeriod is the grace period, in seconds, of pods evicted
// for a hard threshold (the kubelet's immediate eviction).
const immediateGracePeriod = 1

// Stats measures the node and its pods.
type Stats interface {
	// NodeObservations measures every signal it can.
	NodeObservations(ctx context.Context) (Observations, error)
	// PodUsage returns what each pod uses; pods it cannot measure are
	// absent.
	PodUsage(ctx context.Context, pods []*v1.Pod) (map[types.UID]PodUsage, error)
}

// DedicatedImageFs is optionally implemented by a Stats source that
// knows whether images live on their own filesystem. With a dedicated
// image filesystem, node-filesystem pressure cannot be relieved by
// deleting containers or images (the kubelet then goes straight to
// eviction); without one, every disk signal reclaims both.
type DedicatedImageFs interface {
	DedicatedImageFs() bool
}

// Reclaimer frees node-level resources before any pod is evicted for
// disk pressure.
type Reclaimer interface {
	DeleteUnusedContainers(ctx context.Context) error
	DeleteUnusedImages(ctx context.Context) (freed int64, err error)
}

// ReclaimFuncs adapts two functions to Reclaimer; a nil one does nothing.
type ReclaimFuncs struct {
	Containers func(ctx context.Context) error
	Images     func(ctx context.Context) (int64, error)
}

// DeleteUnusedContainers implements Reclaimer.
func (r ReclaimFuncs) DeleteUnusedContainers(ctx context.Context) error {
	if r.Containers == nil {
		return nil
	}
	return r.Containers(ctx)
}

// DeleteUnusedImages implements Reclaimer.
func (r ReclaimFuncs) DeleteUnusedImages(ctx context.Context) (int64, error) {
	if r.Images == nil {
		return 0, nil
	}
	return r.Images(ctx)
}

// Deps are the manager's collaborators.
type Deps struct {
	Stats     Stats     // required
	Reclaimer Reclaimer // optional
	// KillPod stops the pod within gracePeriod seconds and records
	// status (phase Failed, reason Evicted) as its final status.
	// Required.
	KillPod func(pod *v1.Pod, status v1.PodStatus, gracePeriod int64) error
	// ActivePods lists the pods that are running or about to (not
	// terminated). Required.
	ActivePods func() []*v1.Pod
	// Volumes measures emptyDir volumes against their sizeLimit at every
	// observation; nil = sizeLimit is not enforced.
	Volumes  VolumeUsage
	Recorder events.Recorder  // default events.Nop
	Node     runtime.Object   // the node EvictionThresholdMet events are about
	Clock    clock.WithTicker // default the real clock
	Logger   *slog.Logger     // default discards
}

// Manager is the eviction manager. Its methods are safe for concurrent
// use; Run owns the monitoring loop.
type Manager struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	clock clock.WithTicker

	mu            sync.Mutex // guards the fields below
	thresholdsMet []Threshold
	firstObserved map[thresholdKey]time.Time
	condLast      map[v1.NodeConditionType]time.Time
	conditions    []v1.NodeConditionType
	evicted       map[types.UID]time.Time // pods evicted and when, until they are gone
}

// New validates the configuration and returns a manager.
func New(cfg Config, deps Deps) (*Manager, error) {
	if deps.Stats == nil || deps.KillPod == nil || deps.ActivePods == nil {
		return nil, fmt.Errorf("%w: eviction manager: Stats, KillPod and ActivePods are required", errdefs.ErrInvalidArgument)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("eviction manager: %w", err)
	}
	if cfg.PressureTransitionPeriod == 0 {
		cfg.PressureTransitionPeriod = 5 * time.Minute
	}
	if cfg.MonitoringInterval == 0 {
		cfg.MonitoringInterval = 10 * time.Second
	}
	if cfg.PodCleanupTimeout == 0 {
		cfg.PodCleanupTimeout = 30 * time.Second
	}
	if deps.Reclaimer == nil {
		deps.Reclaimer = ReclaimFuncs{}
	}
	if deps.Recorder == nil {
		deps.Recorder = events.Nop{}
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Manager{
		cfg: cfg, deps: deps, clock: deps.Clock,
		log:     deps.Logger.With("component", "eviction"),
		evicted: map[types.UID]time.Time{},
	}, nil
}

// Run observes the node every MonitoringInterval until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := m.clock.NewTicker(m.cfg.MonitoringInterval)
	defer t.Stop()
	for {
		if err := m.synchronize(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("eviction manager: observation failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Conditions reports the node's pressure conditions for its status.
func (m *Manager) Conditions() (memory, disk, pid bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.conditions {
		switch c {
		case v1.NodeMemoryPressure:
			memory = true
		case v1.NodeDiskPressure:
			disk = true
		case v1.NodePIDPressure:
			pid = true
		}
	}
	return memory, disk, pid
}

// Admit decides whether a new pod may start: under memory pressure alone
// only BestEffort pods (unless they tolerate the memory-pressure taint)
// are refused; under disk or PID pressure every pod is, except critical
// ones.
func (m *Manager) Admit(pod *v1.Pod) (ok bool, reason, message string) {
	m.mu.Lock()
	conds := slices.Clone(m.conditions)
	m.mu.Unlock()
	if len(conds) == 0 || isCritical(pod) {
		return true, "", ""
	}
	if len(conds) == 1 && conds[0] == v1.NodeMemoryPressure {
		if podQOS(pod) != v1.PodQOSBestEffort || toleratesMemoryPressure(pod) {
			return true, "", ""
		}
	}
	return false, Reason, fmt.Sprintf("The node had condition: %v. ", conds)
}

// synchronize is one monitoring step: observe, update conditions and,
// if a threshold is met past its grace period, reclaim or evict one pod.
func (m *Manager) synchronize(ctx context.Context) error {
	now := m.clock.Now()
	obs, err := m.deps.Stats.NodeObservations(ctx)
	if err != nil {
		return fmt.Errorf("node observations: %w", err)
	}
	all := append(slices.Clone(m.cfg.Hard), m.cfg.Soft...)
	met := thresholdsMet(all, obs, false)

	m.mu.Lock()
	if len(m.thresholdsMet) > 0 {
		// Thresholds met before stay met until their minimum reclaim.
		met = mergeThresholds(met, thresholdsMet(m.thresholdsMet, obs, true))
	}
	m.firstObserved = firstObserved(met, m.firstObserved, now)
	m.condLast = conditionsObserved(met, m.condLast, now)
	conds := activeConditions(m.condLast, m.cfg.PressureTransitionPeriod, now)
	if !slices.Equal(conds, m.conditions) {
		m.log.Info("node pressure conditions changed", "from", m.conditions, "to", conds)
	}
	m.conditions = conds
	active := gracePeriodMet(met, m.firstObserved, now)
	m.thresholdsMet = active
	m.mu.Unlock()

	pods := m.deps.ActivePods()
	// Pods over their own local-storage limits go first; the kubelet then
	// leaves node pressure to the next observation.
	if m.localStorageEviction(ctx, pods) {
		return nil
	}
	if len(active) == 0 {
		return nil
	}
	if m.waitingForCleanup(pods, now) {
		return nil
	}
	sortByEvictionPriority(active)
	th := active[0]
	res := signalResource[th.Signal]
	m.log.Warn("eviction threshold met", "signal", th.Signal, "available", obs[th.Signal].Available)
	m.deps.Recorder.Eventf(m.deps.Node, v1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", res)
	if m.reclaimNode(ctx, th, active) {
		return nil
	}
	m.evictOne(ctx, th, obs, pods)
	return nil
}

// waitingForCleanup reports whether a pod evicted earlier is still there
// (and not for longer than the cleanup timeout): the kubelet waits for it
// before judging whether more must go.
func (m *Manager) waitingForCleanup(pods []*v1.Pod, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	present := map[types.UID]bool{}
	for _, p := range pods {
		present[p.UID] = true
	}
	waiting := false
	for uid, at := range m.evicted {
		if !present[uid] || now.Sub(at) >= m.cfg.PodCleanupTimeout {
			delete(m.evicted, uid)
			continue
		}
		waiting = true
	}
	return waiting
}

// reclaimNode deletes dead containers, then unused images, for disk
// signals, and reports whether that ended every met threshold (counting
// minimum reclaim).
func (m *Manager) reclaimNode(ctx context.Context, th Threshold, active []Threshold) bool {
	res := signalResource[th.Signal]
	if res != v1.ResourceEphemeralStorage && res != resourceInodes {
		return false
	}
	if d, ok := m.deps.Stats.(DedicatedImageFs); ok && d.DedicatedImageFs() &&
		(th.Signal == SignalNodeFsAvailable || th.Signal == SignalNodeFsInodesFree) {
		return false
	}
	if err := m.deps.Reclaimer.DeleteUnusedContainers(ctx); err != nil {
		m.log.Warn("node reclaim: deleting dead containers", "err", err)
	}
	freed, err := m.deps.Reclaimer.DeleteUnusedImages(ctx)
	if err != nil {
		m.log.Warn("node reclaim: deleting unused images", "err", err)
	}
	obs, err := m.deps.Stats.NodeObservations(ctx)
	if err != nil {
		m.log.Warn("node reclaim: observing afterwards", "err", err)
		return false
	}
	if left := thresholdsMet(active, obs, true); len(left) > 0 {
		m.log.Info("node reclaim was not enough", "signal", th.Signal, "imageBytesFreed", freed)
		return false
	}
	m.log.Info("node reclaim relieved the pressure, no pod evicted", "signal", th.Signal, "imageBytesFreed", freed)
	return true
}

// evictOne evicts the first pod in the signal's ranking that is not
// critical and whose kill succeeds.
func (m *Manager) evictOne(ctx context.Context, th Threshold, obs Observations, pods []*v1.Pod) {
	if len(pods) == 0 {
		m.log.Warn("eviction threshold met but there are no pods to evict", "signal", th.Signal)
		return
	}
	pods = slices.Clone(pods)
	usage, err := m.deps.Stats.PodUsage(ctx, pods)
	if err != nil {
		m.log.Warn("pod usage for eviction ranking", "err", err)
	}
	rankPods(th.Signal, pods, usage)
	for _, pod := range pods {
		if isCritical(pod) {
			continue
		}
		u, known := usage[pod.UID]
		msg := evictionMessage(th, obs, pod, u, known)
		grace := m.gracePeriod(th, pod)
		m.log.Warn("evicting pod", "pod", pod.Namespace+"/"+pod.Name, "signal", th.Signal, "gracePeriod", grace)
		if m.evict(pod, evictedStatus(msg), grace) {
			return
		}
	}
	m.log.Error("eviction threshold met but no pod could be evicted", "signal", th.Signal)
}

// evict records the Evicted event and kills pod with status as its final
// status, remembering it until it is gone; it reports success.
func (m *Manager) evict(pod *v1.Pod, status v1.PodStatus, grace int64) bool {
	m.deps.Recorder.Event(pod, v1.EventTypeWarning, Reason, status.Message)
	if err := m.deps.KillPod(pod, status, grace); err != nil {
		m.log.Error("evicting pod failed", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return false
	}
	m.mu.Lock()
	m.evicted[pod.UID] = m.clock.Now()
	m.mu.Unlock()
	return true
}

func (m *Manager) gracePeriod(th Threshold, pod *v1.Pod) int64 {
	if th.GracePeriod == 0 {
		return immediateGracePeriod
	}
	own := int64(v1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		own = *pod.Spec.TerminationGracePeriodSeconds
	}
	if m.cfg.MaxPodGracePeriod < 0 {
		return own
	}
	return min(own, int64(m.cfg.MaxPodGracePeriod/time.Second))
}

// evictedStatus is the final status of an evicted pod.
func evictedStatus(msg string) v1.PodStatus { return status.TerminatedByKubelet(Reason, msg) }
