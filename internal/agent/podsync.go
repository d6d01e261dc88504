package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/podworkers"
)

var _ podworkers.Syncer = (*Agent)(nil)

// SyncPod makes the runtime match one pod's spec and publishes its status.
func (a *Agent) SyncPod(ctx context.Context, pod *v1.Pod) (bool, time.Duration, error) {
	start := a.clock.Now()
	defer func() { a.metrics.observeSync("sync", a.clock.Since(start)) }()

	rs, err := a.runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return false, 0, fmt.Errorf("reading runtime status of pod %s: %w", podDesc(pod), err)
	}
	st := a.generateStatus(pod, rs, nil)
	if st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed {
		a.pods.setStatus(pod.UID, st)
		a.publishStatus(ctx, pod, st)
		return true, 0, nil
	}
	if err := a.cgroups.EnsurePod(pod); err != nil {
		// The cgroup manager records the FailedCreatePodContainer event.
		a.pods.setStatus(pod.UID, st)
		return false, 0, fmt.Errorf("ensuring the cgroup of pod %s: %w", podDesc(pod), err)
	}
	if err := a.prober.AddPod(pod); err != nil {
		a.log.Warn("probes not started", "pod", podDesc(pod), "err", err)
	}

	res := a.runtime.SyncPod(ctx, pod, rs)
	if fresh, err := a.runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace); err == nil {
		rs = fresh
	}
	st = a.generateStatus(pod, rs, res.Waiting)
	a.pods.setStatus(pod.UID, st)
	a.publishStatus(ctx, pod, st)
	a.markStarted(pod, st)
	if st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed {
		return true, 0, nil
	}
	return false, res.RequeueAfter, res.Err
}

// SyncTerminatingPod stops every container of the pod.
func (a *Agent) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, gracePeriod *int64) error {
	a.prober.StopLivenessAndStartup(pod)
	rs, err := a.runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return fmt.Errorf("reading runtime status of pod %s: %w", podDesc(pod), err)
	}
	if err := a.runtime.KillPod(ctx, pod, rs, gracePeriod); err != nil {
		return fmt.Errorf("killing pod %s: %w", podDesc(pod), err)
	}
	if fresh, err := a.runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace); err == nil {
		rs = fresh
	}
	st := a.generateStatus(pod, rs, nil)
	if final, ok := a.pods.finalStatus(pod.UID); ok {
		// Evicted: the eviction manager's phase, reason, message and
		// conditions, with the containers as they ended.
		final.ContainerStatuses, final.InitContainerStatuses = st.ContainerStatuses, st.InitContainerStatuses
		final.StartTime, final.HostIP, final.HostIPs, final.PodIP, final.PodIPs, final.QOSClass = st.StartTime, st.HostIP, st.HostIPs, st.PodIP, st.PodIPs, st.QOSClass
		st = final
	} else if st.Phase == v1.PodRunning || st.Phase == v1.PodPending {
		// Everything is stopped now. A static pod that was deleted is shown
		// by its deletion timestamp; any other pod ends Succeeded when every
		// container exited 0, else Failed, as the kubelet does.
		if pod.DeletionTimestamp == nil || !podspec.IsStatic(pod) {
			st.Phase = stoppedPhase(st)
		}
	}
	a.pods.setStatus(pod.UID, st)
	a.publishStatus(ctx, pod, st)
	return nil
}

// SyncTerminatedPod releases what a stopped pod held.
func (a *Agent) SyncTerminatedPod(ctx context.Context, pod *v1.Pod) error {
	a.prober.RemovePod(pod)
	if err := a.cgroups.RemovePod(ctx, pod.UID); err != nil {
		return fmt.Errorf("removing the cgroup of pod %s: %w", podDesc(pod), err)
	}
	a.removeUnifiedLeftover(pod)
	return nil
}

// podTerminated drops what the agent kept for a pod that is gone for good.
func (a *Agent) podTerminated(uid types.UID) {
	a.devices.RemovePod(uid)
	a.releaseImages(uid)
	a.startLatency.forget(uid)
}

// stoppedPhase is the phase of a pod whose containers were all stopped.
func stoppedPhase(st v1.PodStatus) v1.PodPhase {
	if len(st.ContainerStatuses) == 0 {
		return v1.PodFailed
	}
	for _, c := range st.ContainerStatuses {
		if c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 {
			return v1.PodFailed
		}
	}
	return v1.PodSucceeded
}

// removeUnifiedLeftover removes the empty directory runc leaves for a pod
// in the cgroup2 mount that sits beside the v1 hierarchies on hybrid hosts
// (the cgroup manager does not manage that mount). Nothing to do elsewhere.
func (a *Agent) removeUnifiedLeftover(pod *v1.Pod) {
	parent := a.cm.CgroupParent(pod)
	if parent == "" {
		return
	}
	dir := filepath.Join("/sys/fs/cgroup/unified", parent)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = os.Remove(filepath.Join(dir, e.Name())) // container dirs: empty once stopped
		}
	}
	_ = os.Remove(dir)
}
