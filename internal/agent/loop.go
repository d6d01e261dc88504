package agent

import (
	"context"
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/pleg"
	"github.com/minilet/minilet/internal/podworkers"
)

// sourceSnapshot is the full set of pods one source wants now.
type sourceSnapshot struct {
	source string
	pods   []*v1.Pod
}

// syncLoop is the one place that decides: it reads pod updates, runtime
// changes and probe results, and hands work to the pod workers.
func (a *Agent) syncLoop(ctx context.Context, updates <-chan sourceSnapshot, lifecycle <-chan pleg.Event, probes <-chan types.UID) {
	housekeeping := a.clock.NewTicker(2 * time.Second)
	defer housekeeping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-updates:
			a.applySnapshot(ctx, u)
		case e := <-lifecycle:
			a.resyncPod(e.PodUID)
		case uid := <-probes:
			a.resyncPod(uid)
		case uid := <-a.terminated:
			a.forgetLeaving(ctx, uid)
		case <-housekeeping.C():
			a.housekeeping(ctx)
		}
	}
}

// resyncPod asks the worker of a known pod to sync again now.
func (a *Agent) resyncPod(uid types.UID) {
	if a.pods.isRejected(uid) {
		return // a rejected pod never runs
	}
	if p, ok := a.pods.pod(uid); ok {
		if a.pods.isLeaving(uid) {
			a.workers.Resync(uid)
			return
		}
		a.workers.UpdatePod(p)
	}
}

// applySnapshot diffs a source's new pod set against the current one:
// removals first (so their resources are free for admission), then new
// pods (admitted in creation order), then updates.
func (a *Agent) applySnapshot(ctx context.Context, u sourceSnapshot) {
	want := map[types.UID]*v1.Pod{}
	for _, p := range u.pods {
		want[p.UID] = p
	}
	for _, old := range a.pods.fromSource(u.source) {
		if _, still := want[old.UID]; !still {
			a.removePod(old)
		}
	}
	for uid, p := range a.readd {
		if _, still := want[uid]; !still && p.Annotations[sourceAnnotation] == u.source {
			delete(a.readd, uid)
		}
	}
	var added []*v1.Pod
	for _, p := range u.pods {
		if p.DeletionTimestamp != nil {
			// Deleted in the API server: terminate gracefully, then
			// finalize the deletion (housekeeping).
			if !a.pods.isLeaving(p.UID) {
				a.deletePod(p)
			}
			continue
		}
		if cur, known := a.pods.pod(p.UID); known {
			switch {
			case a.pods.isLeaving(p.UID):
				// Restored while still terminating (same content, same
				// UID): run it again once the old copy is gone.
				a.readd[p.UID] = p
			case !a.pods.isRejected(p.UID):
				a.pods.setDesired(p)
				if cur.Generation != p.Generation || cur.ResourceVersion != p.ResourceVersion || !maps.Equal(cur.Annotations, p.Annotations) {
					a.workers.UpdatePod(p)
				}
			}
			continue
		}
		added = append(added, p)
	}
	sortPods(added)
	for _, p := range added {
		a.addPod(ctx, p)
	}
	a.sourcesSeen[u.source] = true
}

// addPod admits a new pod and starts its worker, or records why it was
// rejected.
func (a *Agent) addPod(ctx context.Context, pod *v1.Pod) {
	if pod.CreationTimestamp.IsZero() {
		pod.CreationTimestamp = metav1.NewTime(a.clock.Now())
	}
	active := a.pods.active()
	a.pods.setDesired(pod)
	if reason, msg, ok := a.admit(ctx, pod, active); !ok {
		a.log.Info("pod rejected", "pod", pod.Namespace+"/"+pod.Name, "reason", reason, "message", msg)
		a.recorder.Event(pod, v1.EventTypeWarning, reason, msg)
		a.pods.reject(pod.UID, rejectedStatus(pod, reason, msg, a.clock.Now()))
		return
	}
	a.workers.UpdatePod(pod)
}

// deletePod terminates a pod the API server deleted gracefully, with the
// grace period it asked for.
func (a *Agent) deletePod(pod *v1.Pod) {
	if _, known := a.pods.pod(pod.UID); !known {
		a.pods.setDesired(pod)
	}
	a.pods.markLeaving(pod)
	a.workers.KillPod(pod, pod.DeletionGracePeriodSeconds)
}

// removePod starts the termination of a pod whose manifest went away.
func (a *Agent) removePod(pod *v1.Pod) {
	if a.pods.isRejected(pod.UID) {
		a.pods.forget(pod.UID)
		return
	}
	now := metav1.NewTime(a.clock.Now())
	leaving := pod.DeepCopy()
	leaving.DeletionTimestamp = &now
	a.pods.markLeaving(leaving)
	a.workers.KillPod(leaving, nil)
}

// rejectedStatus is the status of a pod that failed admission: Failed,
// with the reason and message the kubelet uses.
func rejectedStatus(pod *v1.Pod, reason, message string, now time.Time) v1.PodStatus {
	return v1.PodStatus{
		Phase:   v1.PodFailed,
		Reason:  reason,
		Message: message,
		StartTime: func() *metav1.Time {
			t := metav1.NewTime(now)
			return &t
		}(),
	}
}

// housekeeping forgets pods that finished leaving, stops runtime pods
// nobody wants (left over from an earlier run), and runs the periodic
// cleanups.
func (a *Agent) housekeeping(ctx context.Context) {
	for uid, phase := range a.workers.Known() {
		if phase == podworkers.Terminated {
			a.forgetLeaving(ctx, uid)
		}
	}
	if !a.allSourcesSeen() {
		return // a pod not yet read from its source is not an orphan
	}
	a.sourcesReady.Store(true)
	a.killOrphans(ctx)
	a.devmgr.UpdateAllocatedDevices(a.pods.active())
	a.periodic(ctx)
}

// forgetLeaving drops a pod that finished terminating after its source
// let go of it, and runs it again if its source brought it back meanwhile.
func (a *Agent) forgetLeaving(ctx context.Context, uid types.UID) {
	if !a.pods.isLeaving(uid) || !a.workers.Forget(uid) {
		return
	}
	if p, ok := a.pods.pod(uid); ok && a.cluster != nil {
		// API requests may wait for an unreachable server: not on the loop.
		a.bg.Add(1)
		go func() { defer a.bg.Done(); a.podGoneForGood(ctx, p) }()
	}
	a.pods.forget(uid)
	a.podTerminated(uid)
	if p, ok := a.readd[uid]; ok {
		delete(a.readd, uid)
		a.addPod(ctx, p)
	}
}

func (a *Agent) allSourcesSeen() bool {
	for _, s := range a.sources {
		if !a.sourcesSeen[s] {
			return false
		}
	}
	return true
}

// killOrphans terminates runtime pods that no source wants and no worker
// owns: what an earlier run left behind for pods deleted meanwhile.
func (a *Agent) killOrphans(ctx context.Context) {
	pods, err := a.runtime.GetPods(ctx)
	if err != nil {
		a.log.Warn("listing runtime pods for orphans failed", "err", err)
		return
	}
	known := a.workers.Known()
	for _, rp := range pods {
		if _, ok := known[rp.UID]; ok {
			continue
		}
		if !hasRunning(rp) {
			continue // nothing to stop; container GC removes the remains
		}
		if p, ok := a.pods.pod(rp.UID); ok {
			if a.pods.isRejected(rp.UID) {
				// Rejected after an agent restart while its containers
				// from the last run still run: stop them, keep the
				// rejection as the pod's status.
				if st, ok := a.pods.status(rp.UID); ok {
					a.pods.setFinal(rp.UID, st)
				}
				a.workers.KillPod(p, nil)
			}
			continue
		}
		a.log.Info("terminating a pod no source wants", "pod", rp.Namespace+"/"+rp.Name, "uid", rp.UID)
		now := metav1.NewTime(a.clock.Now())
		orphan := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: rp.UID, Name: rp.Name, Namespace: rp.Namespace, DeletionTimestamp: &now}}
		a.pods.markLeaving(orphan)
		a.workers.KillPod(orphan, nil)
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

func podDesc(p *v1.Pod) string { return fmt.Sprintf("%s/%s", p.Namespace, p.Name) }
