package remote_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/conformance"
	"github.com/minilet/minilet/internal/cri/remote"
)

// Images that scripts/containerd-up.sh builds and imports.
const (
	busyboxImage = "minilet.test/busybox:latest"
	pythonImage  = "minilet.test/python:latest"
)

// endpoint returns the shared containerd's CRI endpoint, or skips the test.
// The shared containerd is used by several test packages at once: tests
// only ever touch the sandboxes they made, and never restart it.
func endpoint(t *testing.T) string {
	t.Helper()
	ep := os.Getenv("MINILET_CONTAINERD_ENDPOINT")
	if ep == "" {
		t.Skip("MINILET_CONTAINERD_ENDPOINT is not set: run scripts/containerd-up.sh and export the unix:// endpoint it prints (make test does both)")
	}
	return ep
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// connect opens a client on ep and closes it when the test ends.
func connect(t *testing.T, ep string) *remote.Runtime {
	t.Helper()
	return connectUntil(t, t, ep)
}

// connectUntil opens a client on ep for t and closes it when owner ends.
func connectUntil(t, owner *testing.T, ep string) *remote.Runtime {
	t.Helper()
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: ep, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("remote.New(%s): %v", ep, err)
	}
	owner.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// TestConformance runs the runtime conformance suite against containerd.
func TestConformance(t *testing.T) {
	ep := endpoint(t)
	suiteT := t
	newRuntime := func(t *testing.T) conformance.RuntimeUnderTest {
		return &hostView{Runtime: connect(t, ep)}
	}
	conformance.Run(t, newRuntime,
		conformance.WithImage(pythonImage),
		// An agent restart on containerd is a new client on the same
		// socket: containerd keeps running the containers meanwhile.
		conformance.WithRestart(func(t *testing.T, rt conformance.RuntimeUnderTest, whileDown func()) conformance.RuntimeUnderTest {
			if err := rt.(*hostView).Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			whileDown()
			// Closed when the whole suite ends: the test's own
			// cleanups (removing its sandbox) still need it.
			return &hostView{Runtime: connectUntil(t, suiteT, ep)}
		}),
	)
}

// hostView gives the suite's containers the view of the host that the
// embedded runtime's containers have and the suite relies on: the host's
// PID namespace (the suite compares a container's $$ with its cgroup's
// procs) and the host's /tmp (the suite's temp dirs are working dirs and
// release files). It also removes the cgroup directories containerd leaves
// under a removed sandbox's cgroup parent, so the suite can remove the
// parent.
type hostView struct {
	*remote.Runtime
}

func (h *hostView) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	cfg = proto.Clone(cfg).(*runtimeapi.PodSandboxConfig)
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{}
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{}
	}
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_POD,
	}
	id, err := h.Runtime.RunPodSandbox(ctx, cfg, handler)
	if err == nil {
		sandboxParents.Store(id, cfg.Linux.CgroupParent)
	}
	return id, err
}

func (h *hostView) CreateContainer(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	cfg = proto.Clone(cfg).(*runtimeapi.ContainerConfig)
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_POD,
	}
	tmp := os.TempDir()
	cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{HostPath: tmp, ContainerPath: tmp})
	return h.Runtime.CreateContainer(ctx, sandboxID, cfg, sandboxCfg)
}

func (h *hostView) RemovePodSandbox(ctx context.Context, id string) error {
	if err := h.Runtime.RemovePodSandbox(ctx, id); err != nil {
		return err
	}
	if parent, ok := sandboxParents.LoadAndDelete(id); ok {
		removeChildCgroups(parent.(string))
	}
	return nil
}

// sandboxParents maps sandbox IDs to their cgroup parents; package-wide so
// a client opened after a restart can still clean up.
var sandboxParents sync.Map

// removeChildCgroups removes the (empty) directories under parent in every
// cgroup v1 hierarchy, deepest first.
func removeChildCgroups(parent string) {
	if parent == "" || parent == "/" {
		return
	}
	mounts, _ := os.ReadDir("/sys/fs/cgroup")
	for _, m := range mounts {
		base := filepath.Join("/sys/fs/cgroup", m.Name(), parent)
		var dirs []string
		_ = filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != base {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}
