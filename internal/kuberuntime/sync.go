package kuberuntime

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/container"
)

// SyncPod makes the runtime match the pod's spec, one step at a time:
// replace a changed sandbox, kill containers that must go, create the
// sandbox, start the next init container(s), start app containers. ps is
// the runtime's view from GetPodStatus. The caller syncs again when PLEG
// reports a change or after Result.RequeueAfter.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus) Result {
	var res Result
	if ps == nil {
		ps = &container.PodStatus{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	}
	acts := computePodActions(pod, ps, m.cfg.ProbeResults)

	if acts.KillPod {
		if acts.SandboxChanged {
			m.cfg.Recorder.Event(pod, v1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
		}
		if err := m.KillPod(ctx, pod, ps, nil); err != nil {
			res.Err = fmt.Errorf("kill pod %s: %w", podDesc(pod), err)
			return res
		}
		if !acts.CreateSandbox {
			return res
		}
	}
	for _, k := range acts.ContainersToKill {
		if err := m.killContainer(ctx, pod, k.Spec, k.ID, newestSandboxIP(ps), k.Message, k.Reason, nil); err != nil {
			res.Err = errors.Join(res.Err, err)
			return res
		}
	}

	sandboxID, podIP := acts.SandboxID, ""
	if acts.CreateSandbox {
		var err error
		sandboxID, podIP, err = m.createSandbox(ctx, pod, acts.Attempt)
		if err != nil {
			res.Err = err
			res.requeue(backoffInitial)
			return res
		}
	} else {
		for _, sb := range ps.Sandboxes {
			if sb.ID == sandboxID {
				podIP = sb.IP
			}
		}
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
	return res
}
