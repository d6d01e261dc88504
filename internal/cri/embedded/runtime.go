// Package embedded is minilet's built-in container runtime. It implements
// the CRI Go interfaces (k8s.io/cri-api/pkg/apis RuntimeService and
// ImageManagerService) with plain host processes: every container runs under
// a small monitor process (the cmd/minilet-monitor binary, or a re-exec of
// the agent binary when that is not installed, see Config.MonitorPath and
// MaybeRunMonitor; the process side lives in package monitorproc) that
// places it in its cgroups, writes its CRI-format log and records its exit
// status, so containers outlive agent restarts.
//
// Pods share the host network; the image "host" (or "") is the host's root
// filesystem. Other images come from registries (PullImage) or archives
// (LoadArchive) into an image store of unpacked layers (imagestore.go);
// containers from them run through a container init (init.go) in their own
// mount, PID, UTS and IPC namespaces on an overlay of the image's layers
// under a writable layer of their own. State lives in JSON files under
// <RootDir>/runtime.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/imagestore"
	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/cri/embedded/sandbox"

	"github.com/minilet/minilet/internal/nodeaddr"
	"k8s.io/utils/clock"
)

// Config configures the embedded runtime.
type Config struct {
	// RootDir is the agent's root directory; runtime state is kept under
	// RootDir/runtime. Required.
	RootDir string
	// Logger receives the runtime's logs. Default: slog.Default().
	Logger *slog.Logger
	// Clock stamps creation times. Default: the real clock. Process exits
	// are polled in real time regardless.
	Clock clock.Clock
	// CgroupMount is where the cgroup hierarchies are mounted. Default:
	// /sys/fs/cgroup.
	CgroupMount string
	// ImageDir holds the image store. Default: RootDir/runtime/images.
	ImageDir string
	// PinnedImages are image references (tags, digests or IDs) reported
	// Pinned, which image GC never removes. "host" is always pinned.
	PinnedImages []string
	// DockerConfigFiles are docker config.json files whose "auths" give
	// registry credentials when a pull request carries none. Default:
	// RootDir/config.json.
	DockerConfigFiles []string
	// MonitorPath is the program container monitors are started from (the
	// small cmd/minilet-monitor binary). Default: "minilet-monitor" next to
	// the agent's executable if that exists and is executable, else a
	// re-exec of the agent itself, whose main must call MaybeRunMonitor.
	MonitorPath string
	// NodeIP is the node's IP, given to host-network sandboxes. Default:
	// what nodeaddr detects.
	NodeIP string
}

// defaultCgroupParent is used for containers whose sandbox has no cgroup
// parent.
const defaultCgroupParent = "/minilet-embedded"

// adoptedPollInterval bounds how late the exit of a re-adopted container
// (one whose monitor a previous agent process started, so not our child) is
// noticed. The exits of our own monitors' containers are noticed when the
// monitor process ends, without polling.
const adoptedPollInterval = time.Second

// Runtime is the embedded CRI runtime. Create it with New; it is safe for
// concurrent use.
type Runtime struct {
	log      *slog.Logger
	clock    clock.Clock
	stateDir string
	cg       cgroups.Driver
	nodeIP   string
	images   *imagestore.Store
	keychain imagestore.DockerConfigKeychain
	pinned   imagestore.Pins
	monitor  string // executable monitors are started from

	overlayOnce sync.Once
	overlayOK   bool

	mu         sync.Mutex
	sandboxes  *sandbox.Store
	containers map[string]*container

	changes chan struct{}
	kick    chan struct{}

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	oomAdjWarning sync.Once
}

// resources are the cgroup settings of a container.
type resources struct {
	CPUShares       int64  `json:"cpuShares,omitempty"`
	CPUQuota        int64  `json:"cpuQuota,omitempty"`
	CPUPeriod       int64  `json:"cpuPeriod,omitempty"`
	MemoryLimit     int64  `json:"memoryLimit,omitempty"`
	MemorySwapLimit int64  `json:"memorySwapLimit,omitempty"`
	PidsLimit       int64  `json:"pidsLimit,omitempty"`
	OOMScoreAdj     *int64 `json:"oomScoreAdj,omitempty"`
}

// containerRecord is the durable, agent-written state of a container; its
// run state comes from the monitor's start and exit records.
type containerRecord struct {
	ID          string            `json:"id"`
	SandboxID   string            `json:"sandboxId"`
	Name        string            `json:"name"`
	Attempt     uint32            `json:"attempt"`
	Image       string            `json:"image"`                // as requested
	ImageID     string            `json:"imageId,omitempty"`    // empty for the host image
	Rootfs      *rootfsRecord     `json:"rootfs,omitempty"`     // nil for the host image
	StopSignal  string            `json:"stopSignal,omitempty"` // the image's, e.g. "SIGQUIT"; default SIGTERM
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	LogPath     string            `json:"logPath,omitempty"` // as given (relative to the sandbox log dir)
	LogFile     string            `json:"logFile,omitempty"` // absolute
	Args        []string          `json:"args"`
	Env         []string          `json:"env,omitempty"`
	WorkingDir  string            `json:"workingDir,omitempty"`
	Resources   *resources        `json:"resources,omitempty"`
	CgroupPath  string            `json:"cgroupPath"` // <parent>/<id>, relative to each hierarchy
	CreatedAt   int64             `json:"createdAt"`
}

// container is a container's in-memory state.
type container struct {
	rec      containerRecord
	dir      string
	start    *startRecord
	exit     *exitRecord
	starting bool
	exited   chan struct{} // closed once exit is set
	// child is set when this agent process started the monitor (so its end
	// is observed by waiting for it), monitorDone once it ended.
	child, monitorDone bool
}

// New opens (or creates) the runtime state under cfg.RootDir and re-adopts
// the containers a previous run left behind.
func New(cfg Config) (*Runtime, error) {
	if cfg.RootDir == "" {
		return nil, errInvalid("embedded runtime config: field RootDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.CgroupMount == "" {
		cfg.CgroupMount = "/sys/fs/cgroup"
	}
	if cfg.NodeIP == "" {
		cfg.NodeIP = nodeaddr.Detect(nil, "").IP
	}
	if cfg.ImageDir == "" {
		cfg.ImageDir = filepath.Join(cfg.RootDir, "runtime", "images")
	}
	if cfg.DockerConfigFiles == nil {
		cfg.DockerConfigFiles = []string{filepath.Join(cfg.RootDir, "config.json")}
	}
	self, _ := os.Executable() // only to find the monitor binary next to it
	monitor, err := monitorExecutable(cfg.MonitorPath, self)
	if err != nil {
		return nil, err
	}
	cg, err := cgroups.New(cgroups.Config{MountRoot: cfg.CgroupMount, Controllers: containerControllers})
	if err != nil {
		return nil, errUnavailable("embedded runtime config: field CgroupMount %q: %v", cfg.CgroupMount, err)
	}
	r := &Runtime{
		log:        cfg.Logger.With("component", "embedded-runtime"),
		clock:      cfg.Clock,
		stateDir:   filepath.Join(cfg.RootDir, "runtime"),
		cg:         cg,
		nodeIP:     cfg.NodeIP,
		containers: map[string]*container{},
		changes:    make(chan struct{}, 1),
		kick:       make(chan struct{}, 1),
		keychain:   imagestore.DockerConfigKeychain{Files: cfg.DockerConfigFiles},
		pinned:     imagestore.NewPins(cfg.PinnedImages, isHostImage),
		monitor:    monitor,
	}
	if r.sandboxes, err = sandbox.Open(r.log, filepath.Join(r.stateDir, "sandboxes")); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.containersDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create runtime state dir: %w", err)
	}
	if err := r.load(); err != nil {
		return nil, err
	}
	if r.images, err = imagestore.Open(r.log, cfg.ImageDir); err != nil {
		return nil, err
	}
	// Layers only removed containers stood on (a crash between the two).
	if err := r.images.PruneLayers(r.layersInUse); err != nil {
		r.log.Warn("cannot prune unused image layers", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go r.watch(ctx)
	r.log.Info("embedded runtime ready", "stateDir", r.stateDir, "cgroupV2", cg.Mode() == cgroups.ModeV2, "sandboxes", len(r.sandboxes.List()), "containers", len(r.containers), "monitor", monitor)
	return r, nil
}

// Close stops the runtime's goroutines. Containers keep running; a later New
// on the same RootDir re-adopts them. Close is idempotent.
func (r *Runtime) Close(context.Context) error {
	r.closeOnce.Do(func() {
		r.cancel()
		r.wg.Wait()
	})
	return nil
}

// Changes signals (coalescing, never blocking the runtime) whenever a
// container started or exited, so that a PLEG can relist at once.
func (r *Runtime) Changes() <-chan struct{} { return r.changes }

func (r *Runtime) signalChange() {
	select {
	case r.changes <- struct{}{}:
	default:
	}
}

func (r *Runtime) kickWatcher() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Runtime) containersDir() string { return filepath.Join(r.stateDir, "containers") }

// load reads all durable state; unreadable files are moved aside.
func (r *Runtime) load() error {
	entries, err := os.ReadDir(r.containersDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(r.containersDir(), e.Name())
		c := &container{dir: dir, exited: make(chan struct{})}
		path := filepath.Join(dir, fileContainer)
		if err := statefile.Read(path, &c.rec); err != nil || c.rec.ID == "" {
			if os.IsNotExist(err) {
				// Crashed half way through CreateContainer (an empty dir), or
				// a record moved aside earlier (kept for inspection).
				_ = os.Remove(dir)
				continue
			}
			statefile.Quarantine(r.log.Warn, path, err)
			continue
		}
		c.start = r.loadStart(dir)
		c.exit = r.loadExit(dir)
		if c.exit != nil {
			close(c.exited)
		}
		r.containers[c.rec.ID] = c
	}
	return nil
}

func (r *Runtime) loadStart(dir string) *startRecord {
	var s startRecord
	path := filepath.Join(dir, fileStart)
	if err := statefile.Read(path, &s); err != nil {
		if errors.Is(err, statefile.ErrCorrupt) {
			statefile.Quarantine(r.log.Warn, path, err)
		}
		return nil
	}
	return &s
}

func (r *Runtime) loadExit(dir string) *exitRecord {
	var x exitRecord
	path := filepath.Join(dir, fileExit)
	if err := statefile.Read(path, &x); err != nil {
		if errors.Is(err, statefile.ErrCorrupt) {
			statefile.Quarantine(r.log.Warn, path, err)
		}
		return nil
	}
	return &x
}

// watch notices container exits: when one of our own monitor children ends
// (kick), and by polling only while re-adopted containers run.
func (r *Runtime) watch(ctx context.Context) {
	defer r.wg.Done()
	poll := time.NewTimer(adoptedPollInterval)
	defer poll.Stop()
	for {
		adopted := r.checkExits()
		var tick <-chan time.Time
		if adopted > 0 {
			poll.Reset(adoptedPollInterval)
			tick = poll.C
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-r.kick:
		}
	}
}

// checkExits is one step of watch: it records the exit of every running
// container whose monitor wrote an exit record or died. Containers of our
// own monitors are only looked at once their monitor ended. It returns how
// many running containers have a monitor that is not our child.
func (r *Runtime) checkExits() (adopted int) {
	r.mu.Lock()
	var check []*container
	for _, c := range r.containers {
		if c.start == nil || c.exit != nil {
			continue
		}
		if !c.child {
			adopted++
		}
		if !c.child || c.monitorDone {
			check = append(check, c)
		}
	}
	r.mu.Unlock()
	for _, c := range check {
		x := r.loadExit(c.dir)
		if x == nil {
			if monitorAlive(c.start) {
				continue
			}
			// The monitor may have written the record just before exiting.
			if x = r.loadExit(c.dir); x == nil {
				x = &exitRecord{ExitCode: 255, FinishedAt: time.Now().UnixNano(), Reason: reasonError,
					Message: "the container's monitor exited without recording the exit status"}
				if err := statefile.Write(filepath.Join(c.dir, fileExit), x); err != nil {
					r.log.Warn("cannot record container exit", "container", c.rec.ID, "err", err)
				}
			}
		}
		r.setExit(c, x)
	}
	return adopted
}

func (r *Runtime) setExit(c *container, x *exitRecord) {
	r.mu.Lock()
	changed := c.exit == nil
	if changed {
		c.exit = x
		close(c.exited)
	}
	r.mu.Unlock()
	if changed {
		r.log.Info("container exited", "container", c.rec.ID, "name", c.rec.Name, "exitCode", x.ExitCode, "reason", x.Reason)
		r.signalChange()
	}
}

// monitorAlive reports whether the monitor that wrote s still runs.
func monitorAlive(s *startRecord) bool {
	if s.MonitorPid <= 0 {
		return false
	}
	ticks, alive := procStartTicks(s.MonitorPid)
	return alive && (s.MonitorTicks == 0 || ticks == s.MonitorTicks)
}
