// Package supervisor runs the embedded runtime's containers: each under a
// monitor process (package monitorproc) that places it in its cgroups,
// writes its log and records its exit, so that containers outlive the
// agent. The supervisor keeps each container's state directory (its
// record, the monitor's spec, start and exit records, its writable layer),
// starts, stops, kills and removes containers, re-adopts those a previous
// agent process left running, notices their exits, and runs commands in
// them (exec). It knows nothing about CRI messages: the runtime turns
// those into Records.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"
)

// Config configures a Supervisor.
type Config struct {
	// Dir holds one state directory per container. Required.
	Dir string
	// Logger receives the supervisor's logs. Default: slog.Default().
	Logger *slog.Logger
	// Cgroups creates, limits, measures and removes container cgroups.
	// Required.
	Cgroups cgroups.Driver
	// Monitor is the program monitors are started from (see
	// MonitorExecutable). Required.
	Monitor string
	// ExecHelper is the program execs enter containers through (see
	// ExecHelperExecutable). Default: Monitor, whose trampoline does it.
	ExecHelper string
	// Layers locates the image layers of containers from images. Required.
	Layers Layers
	// MonitorCgroup is the cgroup monitors move into, outside the agent's
	// (the agent gives <cgroup root>/MonitorCgroupName). Nil: monitors
	// stay in the cgroup of whoever started them.
	MonitorCgroup cgroups.Name
}

// Layers is where image layers are unpacked (the image store).
type Layers interface {
	// LayerPath is the directory of the layer with this diffID.
	LayerPath(diffID string) string
}

// Supervisor runs containers. Create it with Open; it is safe for
// concurrent use.
type Supervisor struct {
	log     *slog.Logger
	dir     string
	cg      cgroups.Driver
	monitor string
	// execHelper is the exec trampoline's program.
	execHelper string
	layers     Layers
	// monDirs are the monitors' own cgroup directories (see
	// MonitorCgroupName).
	monDirs []monitorproc.CgroupDir

	mu         sync.Mutex
	containers map[string]*container

	changes chan struct{}
	kick    chan struct{}

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	oomAdjWarning sync.Once
}

// container is a container's in-memory state; Supervisor.mu guards it.
type container struct {
	rec      Record
	dir      string
	start    *monitorproc.StartRecord
	exit     *monitorproc.ExitRecord
	starting bool
	exited   chan struct{} // closed once exit is set
	// child is set when this agent process started the monitor (so its end
	// is observed by waiting for it), monitorDone once it ended.
	child, monitorDone bool
	// stateLost says what was lost and done when this run re-adopted the
	// running container after losing its state (kept in memory only: it
	// is told once, by the run that found it).
	stateLost string
}

func (c *container) snapshot() Container {
	return Container{Record: c.rec, Start: c.start, Exit: c.exit, StateLost: c.stateLost}
}

// Open loads the containers recorded in cfg.Dir (creating it), re-adopting
// those still running, and starts watching for their exits.
func Open(cfg Config) (*Supervisor, error) {
	switch {
	case cfg.Dir == "":
		return nil, fmt.Errorf("supervisor config: field Dir is required: %w", errdefs.ErrInvalidArgument)
	case cfg.Cgroups == nil:
		return nil, fmt.Errorf("supervisor config: field Cgroups is required: %w", errdefs.ErrInvalidArgument)
	case cfg.Monitor == "":
		return nil, fmt.Errorf("supervisor config: field Monitor is required: %w", errdefs.ErrInvalidArgument)
	case cfg.Layers == nil:
		return nil, fmt.Errorf("supervisor config: field Layers is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ExecHelper == "" {
		cfg.ExecHelper = cfg.Monitor
	}
	s := &Supervisor{
		log: cfg.Logger, dir: cfg.Dir, cg: cfg.Cgroups, monitor: cfg.Monitor, execHelper: cfg.ExecHelper, layers: cfg.Layers,
		containers: map[string]*container{},
		changes:    make(chan struct{}, 1),
		kick:       make(chan struct{}, 1),
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create runtime state dir: %w", err)
	}
	s.monDirs = s.monitorCgroupDirs(cfg.MonitorCgroup)
	if err := s.load(); err != nil {
		return nil, err
	}
	s.recoverLost()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go s.watch(ctx)
	return s, nil
}

// Close stops watching. Containers keep running; a later Open on the same
// directory re-adopts them. Close is idempotent.
func (s *Supervisor) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
}

// Changes signals (coalescing, never blocking the supervisor) whenever a
// container started or exited.
func (s *Supervisor) Changes() <-chan struct{} { return s.changes }

func (s *Supervisor) signalChange() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

func (s *Supervisor) kickWatcher() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// load reads the containers' durable state; unreadable files are moved
// aside.
func (s *Supervisor) load() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(s.dir, e.Name())
		c := &container{dir: dir, exited: make(chan struct{})}
		path := filepath.Join(dir, fileContainer)
		if err := statefile.Read(path, &c.rec); err != nil || c.rec.ID == "" {
			if os.IsNotExist(err) {
				// Crashed half way through Create (an empty dir), or a
				// record moved aside earlier (kept for inspection).
				_ = os.Remove(dir)
				continue
			}
			statefile.Quarantine(s.log.Warn, path, err)
			continue
		}
		c.start = s.loadStart(dir)
		c.exit = s.loadExit(dir)
		if c.exit != nil {
			close(c.exited)
		}
		s.containers[c.rec.ID] = c
	}
	return nil
}

func (s *Supervisor) loadStart(dir string) *monitorproc.StartRecord {
	var x monitorproc.StartRecord
	if !s.loadRecord(filepath.Join(dir, monitorproc.FileStart), &x) {
		return nil
	}
	return &x
}

func (s *Supervisor) loadExit(dir string) *monitorproc.ExitRecord {
	var x monitorproc.ExitRecord
	if !s.loadRecord(filepath.Join(dir, monitorproc.FileExit), &x) {
		return nil
	}
	return &x
}

// loadRecord reads one of the monitor's records; a corrupt one is moved
// aside (and reported missing).
func (s *Supervisor) loadRecord(path string, v any) bool {
	err := statefile.Read(path, v)
	if errors.Is(err, statefile.ErrCorrupt) {
		statefile.Quarantine(s.log.Warn, path, err)
	}
	return err == nil
}

func (s *Supervisor) get(id string) (*container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return nil, errNotFound(id)
	}
	return c, nil
}

func errNotFound(id string) error { return fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound) }

// Get returns a snapshot of container id, or an error classified NotFound.
func (s *Supervisor) Get(id string) (Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return Container{}, errNotFound(id)
	}
	return c.snapshot(), nil
}

// List returns snapshots of every container, in no particular order.
func (s *Supervisor) List() []Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Container, 0, len(s.containers))
	for _, c := range s.containers {
		out = append(out, c.snapshot())
	}
	return out
}

// LayersInUse are the image layers (diffIDs) containers' root filesystems
// stand on.
func (s *Supervisor) LayersInUse() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := map[string]bool{}
	for _, c := range s.containers {
		if c.rec.Rootfs != nil {
			for _, l := range c.rec.Rootfs.Layers {
				in[l] = true
			}
		}
	}
	return in
}
