package logs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
)

// DefaultMonitorInterval is how often the Manager checks container logs,
// the kubelet's containerLogMonitorInterval default.
const DefaultMonitorInterval = 10 * time.Second

// Runtime is what the Manager needs of the CRI runtime: the containers,
// where each writes its log, and a way to make a running one continue in a
// new file.
type Runtime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	ReopenContainerLog(ctx context.Context, containerID string) error
}

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	Runtime Runtime // required
	// Root is the log root (<root-dir>/logs). Only containers logging
	// below it are rotated (the runtime may serve other clients too), and
	// only rotated files below it are cleaned up.
	Root string
	// Policy bounds each container's files.
	Policy Policy
	// Interval between checks. Default DefaultMonitorInterval.
	Interval time.Duration
	// Clock drives the checks and names rotated files. Default: the real
	// clock.
	Clock clock.WithTicker
	// Logger default: discards.
	Logger *slog.Logger
}

// Manager enforces the log policy on running containers, as the kubelet's
// container log manager: every Interval, each running container's log
// that reached Policy.MaxSize is rotated, and rotated files of containers
// the runtime no longer has are deleted.
type Manager struct {
	cfg ManagerConfig
	log *slog.Logger

	mu sync.Mutex
	// paths caches each container's log path (it never changes); "" for
	// a container that logs nowhere or outside Root.
	paths map[string]string
}

// NewManager checks cfg and returns a Manager; Run starts it.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("log manager: no runtime")
	}
	if cfg.Root == "" || !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("log manager: log root %q must be an absolute path", cfg.Root)
	}
	if cfg.Policy.MaxSize <= 0 || cfg.Policy.MaxFiles < 2 {
		return nil, fmt.Errorf("log manager: policy %+v: want MaxSize > 0 and MaxFiles >= 2", cfg.Policy)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultMonitorInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Root = filepath.Clean(cfg.Root)
	return &Manager{cfg: cfg, log: log.With("component", "container-log-manager"), paths: map[string]string{}}, nil
}

// Run checks the logs every Interval until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := m.cfg.Clock.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if err := m.RotateOnce(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("container log rotation", "err", err)
			}
		}
	}
}

// RotateOnce does one round: it rotates the logs of running containers
// that need it and removes the rotated files of removed containers. A
// failure for one container does not stop the others; all are returned.
func (m *Manager) RotateOnce(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs, err := m.cfg.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	live := make(map[string]bool, len(cs))
	seen := make(map[string]bool, len(cs))
	complete := true // every container's log path is known
	for _, c := range cs {
		seen[c.Id] = true
		path, err := m.logPath(ctx, c.Id)
		if errdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			complete = false
			errs = append(errs, err)
			continue
		}
		if path == "" {
			continue
		}
		live[path] = true
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if err := m.rotate(ctx, c.Id, path); err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", c.Id, err))
		}
	}
	for id := range m.paths {
		if !seen[id] {
			delete(m.paths, id)
		}
	}
	// Without every container's path, a live container's rotated files
	// could look orphaned: clean up next round.
	if complete {
		n, err := RemoveOrphanedRotations(m.cfg.Root, live)
		if n > 0 {
			m.log.Debug("removed rotated logs of removed containers", "files", n)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rotate applies the policy to one running container's log. A missing log
// file (removed by hand, or a rotation cut short between rename and
// reopen) is brought back by a reopen, as the kubelet does.
func (m *Manager) rotate(ctx context.Context, id, path string) error {
	reopen := func() error { return m.cfg.Runtime.ReopenContainerLog(ctx, id) }
	rotated, err := m.cfg.Policy.RotateFile(path, m.cfg.Clock.Now(), reopen)
	if errors.Is(err, os.ErrNotExist) {
		if rerr := reopen(); rerr != nil {
			return fmt.Errorf("log file %s is missing and reopening it failed: %w", path, rerr)
		}
		m.log.Info("container log file was missing; the runtime reopened it", "containerID", id, "path", path)
		return nil
	}
	if rotated {
		m.log.Debug("rotated container log", "containerID", id, "path", path)
	}
	return err
}

// logPath returns the container's log path, asking the runtime once.
func (m *Manager) logPath(ctx context.Context, id string) (string, error) {
	if p, ok := m.paths[id]; ok {
		return p, nil
	}
	st, err := m.cfg.Runtime.ContainerStatus(ctx, id, false)
	if err != nil {
		return "", fmt.Errorf("status of container %s: %w", id, err)
	}
	p := st.GetStatus().GetLogPath()
	if p != "" {
		p = filepath.Clean(p)
		if !underRoot(m.cfg.Root, p) {
			p = ""
		}
	}
	m.paths[id] = p
	return p, nil
}
