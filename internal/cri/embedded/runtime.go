// Package embedded is minilet's built-in container runtime. Runtime
// implements the CRI Go interfaces (k8s.io/cri-api/pkg/apis RuntimeService
// and ImageManagerService) over the runtime's parts, each a package:
//
//   - sandbox: the pod sandboxes' records; podns holds each pod's network,
//     UTS and IPC namespaces, podnet attaches the network one through CNI.
//   - supervisor: containers as host processes, each under a small monitor
//     process (package monitorproc, run by the cmd/minilet-monitor binary
//     or a re-exec of the agent, see Config.MonitorPath and
//     MaybeRunMonitor) that places it in its cgroups, writes its CRI-format
//     log and records its exit, so that containers outlive agent restarts.
//     Execs enter a container through the small C exec helper
//     (cmd/minilet-exec, see Config.ExecHelperPath), else the monitor's
//     trampoline.
//   - spec: what a container runs, from its CRI config and its image.
//   - imagestore and layerfs: images from registries (PullImage) or
//     archives (LoadArchive), their layers unpacked in overlayfs format.
//
// The image "host" (or "") is the host's root filesystem. Containers from
// other images run through a container init in their own mount, PID, UTS
// and IPC namespaces on an overlay of the image's layers under a writable
// layer of their own. State lives in JSON files under <RootDir>/runtime.
//
// This package is the CRI edge: it validates requests, converts CRI
// messages, and gives the parts' errors (classified with internal/errdefs)
// their gRPC codes.
package embedded

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/imagestore"
	"github.com/minilet/minilet/internal/cri/embedded/podnet"
	"github.com/minilet/minilet/internal/cri/embedded/sandbox"
	"github.com/minilet/minilet/internal/cri/embedded/supervisor"
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
	// ExecHelperPath is the program execs (exec probes, kubectl exec)
	// enter containers through (the small cmd/minilet-exec binary).
	// Default: "minilet-exec" next to the monitor binary or the agent's
	// executable, else the monitor program, which can do it too at a
	// higher CPU cost per exec.
	ExecHelperPath string
	// NodeIP is the node's IP, given to host-network sandboxes. Default:
	// what nodeaddr detects.
	NodeIP string
	// CNIConfDir holds the CNI network configuration pods are attached
	// with (the default bridge network is written there when it has
	// none). Empty: only pods on the host's network can run.
	CNIConfDir string
	// CNIBinDirs are searched for CNI plugins. Required with CNIConfDir.
	CNIBinDirs []string
	// CNICacheDir keeps libcni's attachment records. Default:
	// RootDir/cni/cache.
	CNICacheDir string
	// CgroupRoot is the agent's --cgroup-root (a cgroupfs path such as
	// /minilet): container monitors run in its minilet-monitors child.
	// Empty: monitors stay in the agent's cgroup.
	CgroupRoot string
}

// defaultCgroupParent is used for containers whose sandbox has no cgroup
// parent.
const defaultCgroupParent = "/minilet-embedded"

// Runtime is the embedded CRI runtime. Create it with New; it is safe for
// concurrent use.
type Runtime struct {
	log       *slog.Logger
	clock     clock.Clock
	stateDir  string
	cg        cgroups.Driver
	nodeIP    string
	monitor   string          // the program monitors and pauses run from
	net       *podnet.Network // nil: no pod networking configured
	sandboxes *sandbox.Store
	ctrs      *supervisor.Supervisor
	images    *imagestore.Store
	keychain  imagestore.DockerConfigKeychain
	pinned    imagestore.Pins

	overlayOnce sync.Once
	overlayOK   bool

	streaming streamServer
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
	monitor, err := supervisor.MonitorExecutable(cfg.MonitorPath, self)
	if err != nil {
		return nil, criErr(err)
	}
	execHelper, err := supervisor.ExecHelperExecutable(cfg.ExecHelperPath, monitor, self)
	if err != nil {
		return nil, criErr(err)
	}
	cg, err := cgroups.New(cgroups.Config{MountRoot: cfg.CgroupMount, Controllers: supervisor.ContainerControllers})
	if err != nil {
		return nil, errUnavailable("embedded runtime config: field CgroupMount %q: %v", cfg.CgroupMount, err)
	}
	r := &Runtime{
		log:      cfg.Logger.With("component", "embedded-runtime"),
		clock:    cfg.Clock,
		stateDir: filepath.Join(cfg.RootDir, "runtime"),
		cg:       cg,
		nodeIP:   cfg.NodeIP,
		monitor:  monitor,
		keychain: imagestore.DockerConfigKeychain{Files: cfg.DockerConfigFiles},
		pinned:   imagestore.NewPins(cfg.PinnedImages, isHostImage),
	}
	if cfg.CNIConfDir != "" {
		if cfg.CNICacheDir == "" {
			cfg.CNICacheDir = filepath.Join(cfg.RootDir, "cni", "cache")
		}
		if r.net, err = podnet.New(podnet.Config{ConfDir: cfg.CNIConfDir, BinDirs: cfg.CNIBinDirs, CacheDir: cfg.CNICacheDir, Logger: cfg.Logger}); err != nil {
			return nil, errInvalid("embedded runtime config: %v", err)
		}
		// Said once at start: every pod off the host network would fail.
		if err := r.net.CheckPlugins(); err != nil {
			r.log.Warn("pods off the host network cannot start until the CNI plugins are installed (hostNetwork pods can)", "err", err)
		}
	}
	if r.sandboxes, err = sandbox.Open(r.log, filepath.Join(r.stateDir, "sandboxes")); err != nil {
		return nil, err
	}
	r.removeOrphanNamespaces(context.Background())
	if r.images, err = imagestore.Open(r.log, cfg.ImageDir); err != nil {
		return nil, err
	}
	var monitorCgroup cgroups.Name
	if cfg.CgroupRoot != "" {
		root, err := cgroups.ParseCgroupfs(cfg.CgroupRoot)
		if err != nil {
			return nil, errInvalid("embedded runtime config: field CgroupRoot: %v", err)
		}
		monitorCgroup = root.Child(supervisor.MonitorCgroupName)
	}
	if r.ctrs, err = supervisor.Open(supervisor.Config{
		Dir: filepath.Join(r.stateDir, "containers"), Logger: r.log, Cgroups: cg, Monitor: monitor, ExecHelper: execHelper, Layers: r.images,
		MonitorCgroup: monitorCgroup,
	}); err != nil {
		return nil, err
	}
	// Layers only removed containers stood on (a crash between the two).
	if err := r.images.PruneLayers(r.ctrs.LayersInUse); err != nil {
		r.log.Warn("cannot prune unused image layers", "err", err)
	}
	r.log.Info("embedded runtime ready", "stateDir", r.stateDir, "cgroupV2", cg.Mode() == cgroups.ModeV2,
		"sandboxes", len(r.sandboxes.List()), "containers", len(r.ctrs.List()), "monitor", monitor)
	return r, nil
}

// Close stops the runtime's goroutines. Containers keep running; a later New
// on the same RootDir re-adopts them. Close is idempotent.
func (r *Runtime) Close(context.Context) error {
	r.streaming.stop()
	r.ctrs.Close()
	return nil
}

// Changes signals (coalescing, never blocking the runtime) whenever a
// container started or exited, so that a PLEG can relist at once.
func (r *Runtime) Changes() <-chan struct{} { return r.ctrs.Changes() }
