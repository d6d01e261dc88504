// Package nodeshutdown is the kubelet's graceful node shutdown: the agent
// holds a logind "delay" inhibitor lock on shutdown; when logind announces
// a shutdown (PrepareForShutdown), it marks the node as shutting down (not
// Ready, new pods rejected), stops the pods group by group, lowest priority
// first, each group within its period (shutdownGracePeriod,
// shutdownGracePeriodCriticalPods, shutdownGracePeriodByPodPriority), with
// the kubelet's final status, then releases the lock so the shutdown goes
// on.
package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/status"
)

// The kubelet's words.
const (
	// Reason and Message are a stopped pod's final status.
	Reason  = "Terminated"
	Message = "Pod was terminated in response to imminent node shutdown."
	// RejectReason and RejectMessage refuse pods while the node shuts down.
	RejectReason  = "NodeShutdown"
	RejectMessage = "Pod was rejected as the node is shutting down."
	// EventReason is the node event when a shutdown is announced.
	EventReason = "Shutdown"
	// NotReadyMessage is the node's Ready message meanwhile.
	NotReadyMessage = "node is shutting down"
)

// Logind is what the manager needs of systemd-logind.
type Logind interface {
	// InhibitDelayMax is logind's InhibitDelayMaxSec: how long a delay
	// lock may hold a shutdown back.
	InhibitDelayMax() (time.Duration, error)
	// RaiseInhibitDelayMax makes logind allow at least d (a drop-in and a
	// reload, as the kubelet does).
	RaiseInhibitDelayMax(d time.Duration) error
	// Inhibit takes a delay lock on shutdown; release drops it.
	Inhibit() (release func(), err error)
	// PrepareForShutdown delivers logind's announcements: true when a
	// shutdown begins, false when one is cancelled. It ends with ctx.
	PrepareForShutdown(ctx context.Context) (<-chan bool, error)
}

// Config configures the manager.
type Config struct {
	// Period is shutdownGracePeriod; 0 (with no ByPriority) disables the
	// manager.
	Period time.Duration
	// CriticalPeriod is shutdownGracePeriodCriticalPods, part of Period.
	CriticalPeriod time.Duration
	// ByPriority is shutdownGracePeriodByPodPriority; when set, Period
	// and CriticalPeriod are not used.
	ByPriority []PriorityPeriod
	Logind     Logind // required when enabled
	// KillPod stops the pod within grace seconds with status as its final
	// one. Required.
	KillPod func(pod *v1.Pod, status v1.PodStatus, grace int64) error
	// ActivePods lists the pods not yet terminated. Required.
	ActivePods func() []*v1.Pod
	Recorder   events.Recorder  // default none
	Node       runtime.Object   // what the Shutdown event is about
	Clock      clock.WithTicker // default the real clock
	Logger     *slog.Logger
}

// Manager watches for shutdowns. Create it with New.
type Manager struct {
	cfg    Config
	groups []PriorityPeriod
	log    *slog.Logger

	mu           sync.Mutex
	shuttingDown bool
	release      func() // the held lock, nil if none

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New returns a manager; Enabled says whether it has anything to do.
func New(cfg Config) (*Manager, error) {
	if cfg.Period < 0 || cfg.CriticalPeriod < 0 || cfg.CriticalPeriod > cfg.Period {
		return nil, fmt.Errorf("shutdownGracePeriodCriticalPods (%s) must be between 0 and shutdownGracePeriod (%s)", cfg.CriticalPeriod, cfg.Period)
	}
	for i, p := range cfg.ByPriority {
		if p.Period < 0 {
			return nil, fmt.Errorf("shutdownGracePeriodByPodPriority[%d].shutdownGracePeriodSeconds: must not be negative", i)
		}
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
	m := &Manager{cfg: cfg, log: cfg.Logger.With("component", "nodeshutdown"), done: make(chan struct{})}
	if !m.Enabled() {
		return m, nil
	}
	if cfg.Logind == nil || cfg.KillPod == nil || cfg.ActivePods == nil {
		return nil, errors.New("node shutdown manager: fields Logind, KillPod and ActivePods are required")
	}
	m.groups = periods(cfg.Period, cfg.CriticalPeriod, cfg.ByPriority)
	return m, nil
}

// Enabled reports whether a grace period is configured.
func (m *Manager) Enabled() bool { return m.cfg.Period > 0 || len(m.cfg.ByPriority) > 0 }

// total is the longest a shutdown may be held back: every group's period.
func (m *Manager) total() time.Duration {
	var d time.Duration
	for _, g := range m.groups {
		d += g.Period
	}
	return d
}

// Start takes the inhibitor lock (raising logind's InhibitDelayMaxSec to
// the total period if it is lower) and watches for shutdowns until ctx
// ends or Stop. A disabled manager does nothing.
func (m *Manager) Start(ctx context.Context) error {
	if !m.Enabled() {
		close(m.done)
		return nil
	}
	lg := m.cfg.Logind
	max, err := lg.InhibitDelayMax()
	if err != nil {
		return fmt.Errorf("graceful node shutdown: reading logind's InhibitDelayMaxSec: %w", err)
	}
	if max < m.total() {
		if err := lg.RaiseInhibitDelayMax(m.total()); err != nil {
			return fmt.Errorf("graceful node shutdown: raising logind's InhibitDelayMaxSec to %s: %w", m.total(), err)
		}
		if max, err = lg.InhibitDelayMax(); err != nil || max < m.total() {
			return fmt.Errorf("graceful node shutdown: logind's InhibitDelayMaxSec is %s (%v), less than the shutdownGracePeriod %s", max, err, m.total())
		}
	}
	ctx, m.cancel = context.WithCancel(ctx)
	announcements, err := lg.PrepareForShutdown(ctx)
	if err != nil {
		m.cancel()
		return fmt.Errorf("graceful node shutdown: watching logind: %w", err)
	}
	if err := m.inhibit(); err != nil {
		m.cancel()
		return err
	}
	m.log.Info("holding shutdown for the pods' graceful termination", "inhibitDelayMax", max, "groups", len(m.groups), "total", m.total())
	go m.run(ctx, announcements)
	return nil
}

func (m *Manager) inhibit() error {
	release, err := m.cfg.Logind.Inhibit()
	if err != nil {
		return fmt.Errorf("graceful node shutdown: taking logind's inhibitor lock: %w", err)
	}
	m.mu.Lock()
	m.release = release
	m.mu.Unlock()
	return nil
}

func (m *Manager) run(ctx context.Context, announcements <-chan bool) {
	defer close(m.done)
	defer m.releaseLock()
	for {
		select {
		case <-ctx.Done():
			return
		case starting, ok := <-announcements:
			if !ok {
				return
			}
			m.Step(ctx, starting)
		}
	}
}

// Step handles one announcement: a shutdown stops the pods and releases
// the lock; a cancelled one makes the node ready again and takes the lock
// anew.
func (m *Manager) Step(ctx context.Context, starting bool) {
	m.mu.Lock()
	was := m.shuttingDown
	m.shuttingDown = starting
	m.mu.Unlock()
	switch {
	case starting && !was:
		m.log.Info("the node is shutting down: stopping pods")
		m.cfg.Recorder.Event(m.cfg.Node, v1.EventTypeNormal, EventReason, "Shutdown manager detected shutdown event")
		m.stopPods(ctx)
		m.releaseLock()
	case !starting && was:
		m.log.Info("the node's shutdown was cancelled")
		if err := m.inhibit(); err != nil {
			m.log.Error("cannot hold the next shutdown back", "err", err)
		}
	}
}

// stopPods stops the groups in turn, each within its period.
func (m *Manager) stopPods(ctx context.Context) {
	for _, g := range groupPods(m.cfg.ActivePods(), m.groups) {
		if len(g.pods) == 0 {
			continue
		}
		m.log.Info("stopping pods", "priority", g.Priority, "pods", len(g.pods), "period", g.Period)
		uids := map[types.UID]bool{}
		for _, p := range g.pods {
			uids[p.UID] = true
			if err := m.cfg.KillPod(p, shutdownStatus(), gracePeriod(p, g.Period)); err != nil {
				m.log.Error("cannot stop pod", "pod", p.Namespace+"/"+p.Name, "err", err)
			}
		}
		if !m.waitGone(ctx, uids, g.Period) {
			m.log.Warn("pods still stopping when their shutdown period ended", "priority", g.Priority, "period", g.Period)
		}
	}
}

// waitGone waits until none of uids is active, at most period.
func (m *Manager) waitGone(ctx context.Context, uids map[types.UID]bool, period time.Duration) bool {
	deadline := m.cfg.Clock.After(period)
	tick := m.cfg.Clock.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if !anyActive(m.cfg.ActivePods(), uids) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-tick.C():
		}
	}
}

func anyActive(active []*v1.Pod, uids map[types.UID]bool) bool {
	for _, p := range active {
		if uids[p.UID] {
			return true
		}
	}
	return false
}

// shutdownStatus is a stopped pod's final status, the kubelet's.
func shutdownStatus() v1.PodStatus { return status.TerminatedByKubelet(Reason, Message) }

func (m *Manager) releaseLock() {
	m.mu.Lock()
	release := m.release
	m.release = nil
	m.mu.Unlock()
	if release != nil {
		release()
	}
}

// ShuttingDown reports whether a shutdown is under way: the node is not
// Ready meanwhile.
func (m *Manager) ShuttingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shuttingDown
}

// Admit rejects pods while the node shuts down, in the kubelet's words.
func (m *Manager) Admit(*v1.Pod) (ok bool, reason, message string) {
	if m.ShuttingDown() {
		return false, RejectReason, RejectMessage
	}
	return true, "", ""
}

// Stop ends the watch and drops the lock; idempotent.
func (m *Manager) Stop() {
	m.once.Do(func() {
		if m.cancel != nil {
			m.cancel()
		}
	})
	<-m.done
}
