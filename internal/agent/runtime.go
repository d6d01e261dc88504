package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/images"
	"github.com/minilet/minilet/internal/kuberuntime"
	"github.com/minilet/minilet/internal/prober/probe/exec"
)

// criRuntime is the CRI runtime as the agent's subsystems use it: the
// runtime manager, image GC, node status, exec probes and log rotation.
type criRuntime interface {
	kuberuntime.Runtime
	kuberuntime.Images
	kuberuntime.StreamingRuntime
	images.ImageService
	images.FsInfoer
	Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error)
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
	// ReopenContainerLog makes a running container write to a new file
	// at its log path (after the log manager rotated it).
	ReopenContainerLog(ctx context.Context, containerID string) error
}

// newRuntime returns the embedded runtime, or a CRI client when
// --container-runtime-endpoint is set, and the function that closes it.
func newRuntime(ctx context.Context, cfg *config.Config, nodeIP string, log *slog.Logger) (criRuntime, func(), error) {
	if cfg.ContainerRuntimeEndpoint != "" {
		return newRemoteRuntime(ctx, cfg, log)
	}
	rt, err := embedded.New(embedded.Config{RootDir: cfg.RootDir, Logger: log, PinnedImages: cfg.PinnedImages, NodeIP: nodeIP,
		CNIConfDir: cfg.CNIConfDir, CNIBinDirs: cfg.CNIBinDirs, CNICacheDir: cfg.CNICacheDir, CgroupRoot: cfg.CgroupRoot})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the embedded runtime: %w", err)
	}
	return rt, func() { _ = rt.Close(context.Background()) }, nil
}

// startupWait is how long a starting agent waits for its runtime to answer.
const startupWait = 30 * time.Second

// newRemoteRuntime connects to a CRI runtime over its socket, bounding
// every call by --runtime-request-timeout. A runtime that is not up yet is
// waited for briefly; one that goes away later is reconnected to by the
// client while the node reports Ready=False.
func newRemoteRuntime(ctx context.Context, cfg *config.Config, log *slog.Logger) (criRuntime, func(), error) {
	remote.RouteClientLogs(log.With("component", "cri-client"))
	rt, err := remote.New(ctx, remote.Config{
		Endpoint:       cfg.ContainerRuntimeEndpoint,
		RequestTimeout: cfg.RuntimeRequestTimeout,
		StartupWait:    startupWait,
		Logger:         log.With("component", "cri"),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("--container-runtime-endpoint: %w", err)
	}
	return rt, func() { _ = rt.Close(context.Background()) }, nil
}

// reapOrphanShims ends, at start and then every minute, the containerd
// shims that serve no sandbox or container the runtime lists: what an
// agent killed in the middle of RunPodSandbox can leave behind. Only for
// a CRI endpoint, and only that containerd's shims.
func reapOrphanShims(bg *background, cfg *config.Config, cri criRuntime, recorder events.Recorder, node *v1.Node,
	reg prometheus.Registerer, log *slog.Logger) error {
	if cfg.ContainerRuntimeEndpoint == "" {
		return nil
	}
	r, err := remote.NewShimReaper(remote.ShimReaperConfig{
		Endpoint: cfg.ContainerRuntimeEndpoint, Runtime: cri,
		Registerer: reg, Events: nodeEvents{recorder, node}, Logger: log,
	})
	if err != nil {
		return err
	}
	bg.run(r.Run)
	return nil
}

// nodeEvents records events about the node.
type nodeEvents struct {
	recorder events.Recorder
	node     *v1.Node
}

func (e nodeEvents) NodeEventf(eventtype, reason, messageFmt string, args ...any) {
	e.recorder.Eventf(e.node, eventtype, reason, messageFmt, args...)
}

// runtimeName is the Type of container IDs in pod status.
func runtimeName(cfg *config.Config) string {
	if cfg.ContainerRuntimeEndpoint == "" {
		return "minilet"
	}
	return "containerd"
}

// runtimeVersion is "<name>://<version>" as the runtime reports it, or ""
// when it does not answer.
func runtimeVersion(ctx context.Context, cri criRuntime) string {
	v, err := cri.Version(ctx, "v1")
	if err != nil {
		return ""
	}
	return v.RuntimeName + "://" + v.RuntimeVersion
}

// runtimeChanges returns the runtime's change notifications, if it has any
// (the embedded runtime does: PLEG relists at once instead of at its
// next tick).
func runtimeChanges(r any) <-chan struct{} {
	if c, ok := r.(interface{ Changes() <-chan struct{} }); ok {
		return c.Changes()
	}
	return nil
}

// execer runs exec probes through the CRI runtime's ExecSync.
type execer struct{ cri criRuntime }

var _ exec.Execer = execer{}

func (e execer) ExecSync(ctx context.Context, id container.ID, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	stdout, stderr, err := e.cri.ExecSync(ctx, id.ID, cmd, timeout)
	var exitErr utilexec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return stdout, stderr, int32(exitErr.ExitStatus()), nil
	case errors.Is(err, context.DeadlineExceeded):
		return stdout, stderr, -1, fmt.Errorf("%w: %w", exec.ErrTimedOut, err)
	case err != nil:
		return stdout, stderr, -1, err
	}
	return stdout, stderr, 0, nil
}
