// Package sdnotify tells a service manager (systemd, for a Type=notify
// unit) how the agent is doing: READY once it serves with its pods
// adopted, STOPPING when it ends, and, while the sync loop is healthy, a
// watchdog keep-alive at half the unit's WatchdogSec, so that a stuck agent
// is restarted. Outside such a unit (no NOTIFY_SOCKET) every call does
// nothing.
package sdnotify

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"k8s.io/utils/clock"
)

// Sender sends one notification; daemon.SdNotify in production.
type Sender func(state string) (sent bool, err error)

// Config configures a Notifier.
type Config struct {
	// Send delivers a state. Default: systemd's notify socket.
	Send Sender
	// WatchdogInterval is the unit's WatchdogSec (0: no watchdog).
	// Default: read from the environment (WATCHDOG_USEC).
	WatchdogInterval *time.Duration
	// Healthy gates the keep-alive: while it fails, none is sent.
	// Required with a watchdog.
	Healthy func() error
	Clock   clock.WithTicker // default the real clock
	Logger  *slog.Logger
}

// Notifier sends the agent's states. Create it with New.
type Notifier struct {
	cfg      Config
	watchdog time.Duration
	log      *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New returns a Notifier.
func New(cfg Config) (*Notifier, error) {
	if cfg.Send == nil {
		cfg.Send = func(state string) (bool, error) { return daemon.SdNotify(false, state) }
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var wd time.Duration
	if cfg.WatchdogInterval != nil {
		wd = *cfg.WatchdogInterval
	} else {
		var err error
		if wd, err = daemon.SdWatchdogEnabled(false); err != nil {
			return nil, fmt.Errorf("systemd watchdog settings (WATCHDOG_USEC): %w", err)
		}
	}
	if wd > 0 && cfg.Healthy == nil {
		return nil, fmt.Errorf("sdnotify: field Healthy is required with a watchdog")
	}
	return &Notifier{cfg: cfg, watchdog: wd, log: cfg.Logger.With("component", "sdnotify"), done: make(chan struct{})}, nil
}

// Ready says the agent serves, with status as the unit's status line.
func (n *Notifier) Ready(status string) { n.send(daemon.SdNotifyReady + "\nSTATUS=" + status) }

// Stopping says the agent is shutting down (its pods keep running).
func (n *Notifier) Stopping() {
	n.send(daemon.SdNotifyStopping + "\nSTATUS=stopping; pods keep running")
}

func (n *Notifier) send(state string) {
	if _, err := n.cfg.Send(state); err != nil {
		n.log.Warn("cannot notify the service manager", "err", err)
	}
}

// Start sends watchdog keep-alives until ctx ends or Stop; nothing when
// the unit has no watchdog. Call it once.
func (n *Notifier) Start(ctx context.Context) {
	if n.watchdog <= 0 {
		close(n.done)
		return
	}
	ctx, n.cancel = context.WithCancel(ctx)
	go n.run(ctx)
}

func (n *Notifier) run(ctx context.Context) {
	defer close(n.done)
	t := n.cfg.Clock.NewTicker(n.watchdog / 2)
	defer t.Stop()
	for {
		n.keepAlive()
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// keepAlive sends one keep-alive if the agent is healthy.
func (n *Notifier) keepAlive() {
	if err := n.cfg.Healthy(); err != nil {
		n.log.Error("not telling the watchdog the agent is alive: it is not healthy", "err", err)
		return
	}
	n.send(daemon.SdNotifyWatchdog)
}

// Stop ends the keep-alives and waits for them; idempotent.
func (n *Notifier) Stop() {
	n.once.Do(func() {
		if n.cancel != nil {
			n.cancel()
		}
	})
	<-n.done
}
