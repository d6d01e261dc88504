package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
)

// SyncPod carries out what the lifecycle core decided for one sync of
// the pod, in order: kill the pod (a dead sandbox) or the containers that
// must go, create the sandbox, start the init container(s) and app
// containers named. ps is the runtime's view from GetPodStatus that the
// decision was made on. The caller syncs again when PLEG reports a change
// or after the result's RequeueAfter.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, acts container.PodActions) container.SyncResult {
	var res container.SyncResult
	if ps == nil {
		ps = &container.PodStatus{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	}
	if acts.KillPod {
		if err := m.KillPod(ctx, pod, ps, nil); err != nil {
			res.Err = fmt.Errorf("kill pod %s: %w", podDesc(pod), err)
			return res
		}
		if !acts.CreateSandbox {
			return res
		}
	}
	// Containers to stop go at once, each with its own grace period, as
	// the kubelet stops them: stopping them one after the other would add
	// up their grace periods.
	kills := make([]error, len(acts.ContainersToKill))
	var wg sync.WaitGroup
	for i, k := range acts.ContainersToKill {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kills[i] = m.killContainer(ctx, pod, k.Spec, k.ID.ID, newestSandboxIP(ps), k.Message, k.Reason, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(kills...); err != nil {
		res.Err = errors.Join(res.Err, err)
		return res
	}

	sandboxID, podIP := acts.SandboxID, ""
	if acts.CreateSandbox {
		var err error
		sandboxID, podIP, err = m.createSandbox(ctx, pod, acts.Attempt)
		if err != nil {
			res.Err = err
			res.Requeue(backoffInitial)
			return res
		}
	} else {
		for _, sb := range ps.Sandboxes {
			if sb.ID == sandboxID {
				podIP = sb.IP
			}
		}
	}
	if podIP == "" && pod.Spec.HostNetwork {
		// The runtime gives a sandbox on the host's network no IP; the
		// node's is the pod's (its hosts file, status.podIP), as the
		// kubelet takes it.
		podIP = m.cfg.HostIP
	}
	sandboxCfg := m.sandboxConfig(pod, acts.Attempt)
	if !acts.CreateSandbox {
		for _, sb := range ps.Sandboxes {
			if sb.ID == sandboxID {
				sandboxCfg.Metadata.Attempt = sb.Attempt
			}
		}
	}

	for _, i := range acts.InitContainersToStart {
		m.startContainer(ctx, pod, ps, &pod.Spec.InitContainers[i], sandboxID, podIP, sandboxCfg, &res)
	}
	for _, i := range acts.ContainersToStart {
		m.startContainer(ctx, pod, ps, &pod.Spec.Containers[i], sandboxID, podIP, sandboxCfg, &res)
	}
	ephemeral := podspec.EphemeralContainers(pod)
	for _, i := range acts.EphemeralContainersToStart {
		m.startContainer(ctx, pod, ps, &ephemeral[i], sandboxID, podIP, sandboxCfg, &res)
	}
	return res
}

// UpdateContainerResources changes a running container's cgroup values in
// place (an in-place pod resize).
func (m *Manager) UpdateContainerResources(ctx context.Context, id string, res *runtimeapi.LinuxContainerResources) error {
	if err := m.cfg.Runtime.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{Linux: res}); err != nil {
		return fmt.Errorf("updating the resources of container %s: %w", id, err)
	}
	return nil
}
