package lifecycle

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/podworkers"
)

// gcPeriod is how often housekeeping removes dead containers and
// orphaned cgroups.
const gcPeriod = time.Minute

// Housekeeping forgets pods that finished leaving, stops runtime pods no
// source wants (left over from an earlier run), and runs the periodic
// cleanups. Until every source has sent a snapshot it only forgets: a pod
// not yet read from its source is not an orphan.
func (l *Loop) Housekeeping(ctx context.Context) {
	for uid, phase := range l.cfg.Workers.Known() {
		if phase == podworkers.Terminated {
			l.HandleTerminated(ctx, uid)
		}
	}
	if !l.allSourcesSeen() {
		return
	}
	l.cfg.Pods.markSourcesReady()
	l.killOrphans(ctx)
	l.cfg.Devices.UpdateAllocatedDevices(l.cfg.Pods.Active())
	l.periodic(ctx)
}

func (l *Loop) allSourcesSeen() bool {
	for _, s := range l.cfg.Sources {
		if !l.sourcesSeen[s] {
			return false
		}
	}
	return true
}

// killOrphans terminates runtime pods that no source wants and no worker
// owns: what an earlier run left behind for pods deleted meanwhile, and
// the containers of a pod rejected after a restart.
func (l *Loop) killOrphans(ctx context.Context) {
	runtimePods, err := l.cfg.Runtime.GetPods(ctx)
	if err != nil {
		l.log.Warn("listing runtime pods for orphans failed", "err", err)
		return
	}
	pods := l.cfg.Pods
	known := l.cfg.Workers.Known()
	for _, rp := range runtimePods {
		if _, ok := known[rp.UID]; ok || !hasRunning(rp) {
			continue // a worker owns it, or nothing to stop (GC removes the rest)
		}
		if p, ok := pods.Pod(rp.UID); ok {
			if pods.isRejected(rp.UID) {
				// Rejected after an agent restart while its containers
				// from the last run still run: stop them, and keep the
				// rejection as the status it ends with.
				if st, ok := pods.GetPodStatus(rp.UID); ok {
					pods.setFinal(rp.UID, st)
				}
				l.cfg.Workers.KillPod(p, nil)
			}
			continue
		}
		l.log.Info("terminating a pod no source wants", "pod", rp.Namespace+"/"+rp.Name, "uid", rp.UID)
		now := metav1.NewTime(l.cfg.Clock.Now())
		orphan := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: rp.UID, Name: rp.Name, Namespace: rp.Namespace, DeletionTimestamp: &now}}
		pods.markLeaving(orphan)
		l.cfg.Workers.KillPod(orphan, nil)
	}
}

// hasRunning reports whether a runtime pod still runs anything.
func hasRunning(p *container.Pod) bool {
	for _, c := range p.Containers {
		if c.State == container.StateRunning || c.State == container.StateCreated {
			return true
		}
	}
	for _, s := range p.Sandboxes {
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			return true
		}
	}
	return false
}

// periodic runs the cleanups: probe workers of gone pods and mirror pods
// whose static pod is gone at every round; dead containers, orphaned
// cgroups and orphaned volumes, which need no hurry, once a minute; and
// the pod and container counts.
func (l *Loop) periodic(ctx context.Context) {
	list := l.cfg.Pods.List()
	desired := map[types.UID]struct{}{}
	keep := map[types.UID]bool{}
	for _, p := range list {
		desired[p.UID] = struct{}{}
		keep[p.UID] = true
	}
	for uid := range l.cfg.Workers.Known() {
		keep[uid] = true
	}
	l.cfg.Prober.CleanupPods(desired)
	if now := l.cfg.Clock.Now(); now.Sub(l.lastGC) >= gcPeriod {
		l.lastGC = now
		isGone := func(uid types.UID) bool { return !keep[uid] }
		if err := l.cfg.Runtime.GarbageCollect(ctx, 1, isGone); err != nil {
			l.log.Warn("container garbage collection failed", "err", err)
		}
		if err := l.cfg.Cgroups.CleanupOrphans(ctx, keep); err != nil {
			l.log.Warn("cleaning up orphaned pod cgroups failed", "err", err)
		}
		if l.cfg.Volumes != nil {
			if err := l.cfg.Volumes.CleanupOrphans(keep); err != nil {
				l.log.Warn("cleaning up orphaned pod volumes failed", "err", err)
			}
		}
	}
	if l.cfg.Publisher != nil {
		l.cfg.Publisher.CleanupMirrors(ctx, staticPods(list))
	}
	l.cfg.Metrics.SetCounts(counts(list))
}

func staticPods(list []v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	for i := range list {
		if podspec.IsStatic(&list[i]) {
			out = append(out, &list[i])
		}
	}
	return out
}

// counts are the running pods and the containers by state, as the
// kubelet's running_pods and running_containers gauges.
func counts(list []v1.Pod) (running int, containers map[string]int) {
	containers = map[string]int{"running": 0, "exited": 0, "created": 0}
	for _, p := range list {
		if p.Status.Phase == v1.PodRunning {
			running++
		}
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Running != nil:
				containers["running"]++
			case c.State.Terminated != nil:
				containers["exited"]++
			case c.State.Waiting != nil:
				containers["created"]++
			}
		}
	}
	return running, containers
}
