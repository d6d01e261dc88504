// Package pleg is the pod lifecycle event generator: it lists what the
// runtime holds, compares it with the previous listing, and reports every
// pod whose containers started, died or went away, so the sync loop can
// react without polling each pod.
package pleg

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/container"
)

// EventType says what happened to a container.
type EventType string

// The event types, named as the kubelet names them.
const (
	ContainerStarted EventType = "ContainerStarted"
	ContainerDied    EventType = "ContainerDied"
	ContainerRemoved EventType = "ContainerRemoved"
	SandboxChanged   EventType = "SandboxChanged"
)

// Event is one change to one pod.
type Event struct {
	PodUID      types.UID
	Type        EventType
	ContainerID string
}

// Lister is the runtime listing PLEG compares.
type Lister interface {
	GetPods(ctx context.Context) ([]*container.Pod, error)
}

// Config configures a PLEG.
type Config struct {
	Lister Lister
	Clock  clock.WithTicker
	Logger *slog.Logger
	// Period between relists (default 1s, as the kubelet).
	Period time.Duration
	// Changes, when set, triggers a relist at once (the embedded runtime
	// signals on every container start and exit).
	Changes <-chan struct{}
	// Threshold after which a PLEG that has not relisted is unhealthy
	// (default 3m, as the kubelet).
	Threshold time.Duration
}

// PLEG relists the runtime and emits events.
type PLEG struct {
	cfg    Config
	events chan Event

	mu         sync.Mutex
	lastRelist time.Time
	old        map[string]key // container or sandbox ID -> what it was
}

type key struct {
	uid     types.UID
	state   container.State
	sandbox bool
	ready   bool
}

// New creates a PLEG; call Run to start it.
func New(cfg Config) *PLEG {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Period <= 0 {
		cfg.Period = time.Second
	}
	if cfg.Threshold <= 0 {
		cfg.Threshold = 3 * time.Minute
	}
	return &PLEG{cfg: cfg, events: make(chan Event, 1000)}
}

// Events is the stream of pod lifecycle events.
func (p *PLEG) Events() <-chan Event { return p.events }

// Run relists until ctx ends.
func (p *PLEG) Run(ctx context.Context) {
	t := p.cfg.Clock.NewTicker(p.cfg.Period)
	defer t.Stop()
	for {
		p.Relist(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-p.cfg.Changes:
		}
	}
}

// Healthy reports an error-free relist within the threshold.
func (p *PLEG) Healthy() (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastRelist.IsZero() {
		return true, 0
	}
	since := p.cfg.Clock.Since(p.lastRelist)
	return since <= p.cfg.Threshold, since
}

// Relist lists the runtime once and emits the differences. The first
// listing reports every running container as started.
func (p *PLEG) Relist(ctx context.Context) {
	pods, err := p.cfg.Lister.GetPods(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.cfg.Logger.Warn("relist failed", "err", err)
		}
		return
	}
	now := map[string]key{}
	for _, pod := range pods {
		for _, s := range pod.Sandboxes {
			now[s.ID] = key{uid: pod.UID, sandbox: true, ready: s.State == runtimeapi.PodSandboxState_SANDBOX_READY}
		}
		for _, c := range pod.Containers {
			now[c.ID.ID] = key{uid: pod.UID, state: c.State}
		}
	}
	p.mu.Lock()
	old := p.old
	p.old = now
	p.lastRelist = p.cfg.Clock.Now()
	p.mu.Unlock()

	for _, e := range diff(old, now) {
		select {
		case p.events <- e:
		default:
			p.cfg.Logger.Warn("event channel full, dropping pod lifecycle event", "pod", e.PodUID, "type", e.Type)
		}
	}
}

// diff turns two listings into events, in a stable order.
func diff(old, now map[string]key) []Event {
	var out []Event
	for id, n := range now {
		o, seen := old[id]
		if n.sandbox {
			if seen && o.ready != n.ready {
				out = append(out, Event{PodUID: n.uid, Type: SandboxChanged, ContainerID: id})
			}
			continue
		}
		switch {
		case n.state == container.StateRunning && (!seen || o.state != container.StateRunning):
			out = append(out, Event{PodUID: n.uid, Type: ContainerStarted, ContainerID: id})
		case n.state == container.StateExited && (!seen || o.state != container.StateExited):
			out = append(out, Event{PodUID: n.uid, Type: ContainerDied, ContainerID: id})
		}
	}
	for id, o := range old {
		if _, ok := now[id]; !ok {
			typ := ContainerRemoved
			if o.sandbox {
				typ = SandboxChanged
			}
			out = append(out, Event{PodUID: o.uid, Type: typ, ContainerID: id})
		}
	}
	sortEvents(out)
	return out
}

func sortEvents(es []Event) {
	// Insertion sort: listings are small and this keeps tests stable.
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && less(es[j], es[j-1]); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

func less(a, b Event) bool {
	if a.PodUID != b.PodUID {
		return a.PodUID < b.PodUID
	}
	return a.ContainerID < b.ContainerID
}
