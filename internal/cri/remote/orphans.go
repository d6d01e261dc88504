package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
)

// An agent killed (SIGKILL) during RunPodSandbox drops its connection;
// containerd 1.6 then cancels the call and may lose track of the shim it
// had just started: a shim that serves no sandbox, has no children, and
// runs until the machine stops. The ShimReaper finds such shims of the
// containerd the agent talks to and ends them. It never touches a shim
// of another containerd (its -address differs) or of another namespace,
// a shim with children, or one younger than MinAge (its sandbox may be
// in the making, by any client of the runtime).

// ShimNamespace is the containerd namespace of the CRI plugin's
// sandboxes and containers.
const ShimNamespace = "k8s.io"

// Shim reaper defaults.
const (
	DefaultShimMinAge      = 30 * time.Second
	DefaultShimSweepPeriod = time.Minute
	// shimTermGrace is how long a shim has to end after SIGTERM.
	shimTermGrace = 5 * time.Second
)

// ReasonOrphanedShimKilled is the reason of the node event recorded for
// each orphaned shim ended.
const ReasonOrphanedShimKilled = "OrphanedShimKilled"

// SandboxLister lists what the runtime knows: the reaper's view of it.
type SandboxLister interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

// NodeEventer records an event about the node.
type NodeEventer interface {
	NodeEventf(eventtype, reason, messageFmt string, args ...any)
}

// ShimReaperConfig configures a ShimReaper.
type ShimReaperConfig struct {
	// Endpoint is the CRI endpoint of the containerd (unix://PATH or
	// PATH); only shims whose -address is PATH are considered. Required.
	Endpoint string
	// Runtime lists the sandboxes and containers of that containerd.
	// Required.
	Runtime SandboxLister
	// Namespace of the shims. Default ShimNamespace.
	Namespace string
	// MinAge: younger shims are left alone. Default DefaultShimMinAge.
	MinAge time.Duration
	// Period between sweeps in Run. Default DefaultShimSweepPeriod.
	Period time.Duration
	// Proc is where procfs is mounted. Default /proc.
	Proc string
	// Registerer receives minilet_orphaned_shims_killed_total. Optional.
	Registerer prometheus.Registerer
	// Events records a node event per shim ended. Optional.
	Events NodeEventer
	Clock  clock.WithTicker // default: the real clock
	Logger *slog.Logger     // default: discard
}

// ShimReaper ends the orphaned shims of one containerd.
type ShimReaper struct {
	cfg     ShimReaperConfig
	address string
	killed  prometheus.Counter
	log     *slog.Logger
}

// NewShimReaper validates cfg and returns a reaper.
func NewShimReaper(cfg ShimReaperConfig) (*ShimReaper, error) {
	if cfg.Runtime == nil {
		return nil, fmt.Errorf("shim reaper: Runtime: nil: %w", errdefs.ErrInvalidArgument)
	}
	address := strings.TrimPrefix(cfg.Endpoint, "unix://")
	if !strings.HasPrefix(address, "/") {
		return nil, fmt.Errorf("shim reaper: endpoint %q: want unix:///path/to/socket: %w", cfg.Endpoint, errdefs.ErrInvalidArgument)
	}
	if cfg.MinAge < 0 || cfg.Period < 0 {
		return nil, fmt.Errorf("shim reaper: MinAge %s, Period %s: must not be negative: %w", cfg.MinAge, cfg.Period, errdefs.ErrInvalidArgument)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = ShimNamespace
	}
	if cfg.MinAge == 0 {
		cfg.MinAge = DefaultShimMinAge
	}
	if cfg.Period == 0 {
		cfg.Period = DefaultShimSweepPeriod
	}
	if cfg.Proc == "" {
		cfg.Proc = "/proc"
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &ShimReaper{cfg: cfg, address: address, log: log.With("component", "shim-reaper", "address", address),
		killed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "minilet_orphaned_shims_killed_total",
			Help: "Containerd shims ended because they served no sandbox or container of the runtime.",
		})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.killed); err != nil {
			return nil, fmt.Errorf("shim reaper: registering its metric: %w", err)
		}
	}
	return r, nil
}

// Run sweeps at once, then every Period, until ctx ends. A shim that
// would be an orphan but is younger than MinAge is looked at again as
// soon as it is old enough.
func (r *ShimReaper) Run(ctx context.Context) {
	for {
		_, next, err := r.sweep(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("looking for orphaned containerd shims", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.cfg.Clock.After(next):
		}
	}
}

// Orphan is an orphaned shim the reaper ended.
type Orphan struct {
	PID int
	ID  string
}

// Sweep ends the shims of the containerd that serve nothing it lists,
// have no children and are at least MinAge old, and returns them.
func (r *ShimReaper) Sweep(ctx context.Context) ([]Orphan, error) {
	ended, _, err := r.sweep(ctx)
	return ended, err
}

// sweep is Sweep, and says when to sweep next: after Period, or sooner
// when a shim that is too young to end now may be an orphan.
func (r *ShimReaper) sweep(ctx context.Context) (ended []Orphan, next time.Duration, err error) {
	next = r.cfg.Period
	// /proc first, the runtime's lists after: a sandbox whose shim was
	// seen and whose creation has finished is in the lists.
	shims, err := findShims(r.cfg.Proc, r.address, r.cfg.Namespace)
	if err != nil || len(shims) == 0 {
		return nil, next, err
	}
	known, err := r.known(ctx)
	if err != nil {
		return nil, next, err
	}
	var errs []error
	for _, s := range orphaned(shims, known, 0) {
		if s.Age < r.cfg.MinAge {
			next = min(next, r.cfg.MinAge-s.Age+time.Second)
			continue
		}
		if err := r.end(ctx, s); err != nil {
			errs = append(errs, fmt.Errorf("orphaned shim %s (pid %d): %w", s.ID, s.PID, err))
			continue
		}
		ended = append(ended, Orphan{PID: s.PID, ID: s.ID})
		r.killed.Inc()
		r.log.Warn("ended an orphaned containerd shim: it served no sandbox or container the runtime lists",
			"id", s.ID, "pid", s.PID, "age", s.Age.Round(time.Second))
		if r.cfg.Events != nil {
			r.cfg.Events.NodeEventf("Warning", ReasonOrphanedShimKilled,
				"Killed containerd shim %s (pid %d): it served no sandbox or container of the runtime", s.ID, s.PID)
		}
	}
	return ended, next, errors.Join(errs...)
}

// orphaned picks the shims that serve nothing known, have no children
// and are at least minAge old.
func orphaned(shims []shimProc, known map[string]bool, minAge time.Duration) []shimProc {
	var out []shimProc
	for _, s := range shims {
		if !known[s.ID] && s.Children == 0 && s.Age >= minAge {
			out = append(out, s)
		}
	}
	return out
}

// known is the set of the runtime's sandbox and container IDs, in every
// state.
func (r *ShimReaper) known(ctx context.Context) (map[string]bool, error) {
	sbs, err := r.cfg.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	cs, err := r.cfg.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	known := make(map[string]bool, len(sbs)+len(cs))
	for _, sb := range sbs {
		known[sb.GetId()] = true
	}
	for _, c := range cs {
		known[c.GetId()] = true
	}
	return known, nil
}

// end sends s SIGTERM, then SIGKILL if it has not ended after
// shimTermGrace. The process is pinned (a pidfd) and checked to be the
// same shim, still childless, before any signal.
func (r *ShimReaper) end(ctx context.Context, s shimProc) error {
	p, err := os.FindProcess(s.PID)
	if err != nil {
		return nil // gone
	}
	defer func() { _ = p.Release() }()
	if !r.sameShim(s) {
		return nil // gone, or another process now
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return nil
		}
		return fmt.Errorf("SIGTERM: %w", err)
	}
	if r.waitGone(ctx, s, shimTermGrace) {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.log.Warn("orphaned shim outlived SIGTERM; killing it", "id", s.ID, "pid", s.PID, "grace", shimTermGrace)
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGKILL: %w", err)
	}
	if !r.waitGone(ctx, s, shimTermGrace) {
		return fmt.Errorf("still running %s after SIGKILL", shimTermGrace)
	}
	return nil
}

// sameShim reports whether s's PID is still that shim (same start time),
// alive and without children.
func (r *ShimReaper) sameShim(s shimProc) bool {
	shims, err := findShims(r.cfg.Proc, r.address, r.cfg.Namespace)
	if err != nil {
		return false
	}
	for _, now := range shims {
		if now.PID == s.PID {
			return now.StartTicks == s.StartTicks && now.ID == s.ID && now.Children == 0
		}
	}
	return false
}

// waitGone polls until s has ended (gone or a zombie) or d has passed.
func (r *ShimReaper) waitGone(ctx context.Context, s shimProc, d time.Duration) bool {
	deadline := r.cfg.Clock.Now().Add(d)
	for {
		st, err := readStat(r.cfg.Proc, s.PID)
		if err != nil || st.StartTicks != s.StartTicks || st.State == 'Z' || st.State == 'X' {
			return true
		}
		if !r.cfg.Clock.Now().Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-r.cfg.Clock.After(50 * time.Millisecond):
		}
	}
}
