package cleanup

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/errdefs"
)

// removePods removes the embedded runtime's pod sandboxes the agent left:
// each one's network is released (CNI DEL: its IP lease, veth and host-port
// rules) and its processes end. Running containers refuse the cleanup
// unless cfg.StopPods. A containerd agent's pods are containerd's; their
// cgroups below the cgroup root still refuse it while they run.
func removePods(ctx context.Context, cfg Config, rep *Report) error {
	if cfg.ContainerRuntimeEndpoint != "" || !exists(filepath.Join(cfg.RootDir, "runtime")) {
		return nil
	}
	rt, err := embedded.New(embedded.Config{RootDir: cfg.RootDir, Logger: cfg.Logger,
		CNIConfDir: cfg.CNIConfDir, CNIBinDirs: cfg.CNIBinDirs, CNICacheDir: cfg.CNICacheDir})
	if err != nil {
		return fmt.Errorf("opening the embedded runtime's state in %s: %w", cfg.RootDir, err)
	}
	defer func() { _ = rt.Close(ctx) }()
	ctrs, err := rt.ListContainers(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing the embedded runtime's containers: %w", err)
	}
	sandboxes, err := rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing the embedded runtime's pods: %w", err)
	}
	if running := runningPods(ctrs, sandboxes); len(running) > 0 && !cfg.StopPods {
		return errdefs.Classify(fmt.Errorf("%d pod(s) still run: %s; delete them first (remove their manifests while the agent runs), or pass --stop-pods",
			len(running), strings.Join(running, ", ")), errdefs.ErrConflict)
	}
	for _, sb := range sandboxes {
		name := podName(sb.GetMetadata())
		if err := rt.StopPodSandbox(ctx, sb.GetId()); err != nil {
			return fmt.Errorf("stopping pod %s: %w", name, err)
		}
		if err := rt.RemovePodSandbox(ctx, sb.GetId()); err != nil {
			return fmt.Errorf("removing pod %s: %w", name, err)
		}
		rep.removed("pod sandbox %s (its containers, network attachment and IP)", name)
	}
	return nil
}

// runningPods names the pods with a running container.
func runningPods(ctrs []*runtimeapi.Container, sandboxes []*runtimeapi.PodSandbox) []string {
	names := map[string]string{}
	for _, sb := range sandboxes {
		names[sb.GetId()] = podName(sb.GetMetadata())
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range ctrs {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		name := names[c.GetPodSandboxId()]
		if name == "" {
			name = "sandbox " + c.GetPodSandboxId()
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

func podName(m *runtimeapi.PodSandboxMetadata) string {
	return m.GetNamespace() + "/" + m.GetName()
}
