package lifecycle

import (
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/backoff"
	"github.com/minilet/minilet/internal/container"
)

// The kubelet's crash-loop back-off: 10 s, doubling to 5 min; a container
// that ran for 10 minutes starts over.
const (
	crashBackoffInitial = 10 * time.Second
	crashBackoffMax     = 300 * time.Second
)

// ReasonCrashLoopBackOff is the waiting reason of a container that exited
// and waits out its back-off before it is restarted.
const ReasonCrashLoopBackOff = "CrashLoopBackOff"

// Plan is what one sync of a pod does.
type Plan struct {
	// Actions are for the runtime manager to carry out.
	Actions container.PodActions
	// Waiting says why containers the actions leave out wait
	// (CrashLoopBackOff), and RequeueAfter when the first may start.
	Waiting      map[string]container.Waiting
	RequeueAfter time.Duration
}

// Planner decides what one sync does to a pod: the actions the spec, the
// runtime's view and the probe results call for, less the containers that
// exited and must wait out their crash-loop back-off. It records the
// kubelet's events for what it decides (SandboxChanged, BackOff). Plans
// for different pods may be made in parallel.
type Planner struct {
	crashBackoff *backoff.Backoff
	recorder     Recorder
	clock        clock.Clock

	mu         sync.Mutex
	lastGC     time.Time
	restartAll map[types.UID]time.Time // see restartall.go
}

// NewPlanner returns a Planner whose back-off runs on clk.
func NewPlanner(clk clock.Clock, recorder Recorder) *Planner {
	if recorder == nil {
		recorder = nopRecorder{}
	}
	return &Planner{crashBackoff: backoff.New(clk, crashBackoffInitial, crashBackoffMax), recorder: recorder, clock: clk}
}

// Plan decides one sync of pod from ps (the runtime's view), probes (nil:
// no probe failed) and the containers a resize restarts (name → Killing
// message; nil: none). Containers allowed to restart move their back-off
// one step on.
func (p *Planner) Plan(pod *v1.Pod, ps *container.PodStatus, probes ProbeResults, restarts map[string]string) Plan {
	p.forgetOldBackoffs()
	view := p.sinceRestartAll(pod.UID, ps)
	var killAll []container.ContainerToKill
	if trigger := restartAllTrigger(pod, view); trigger != "" && ps != nil {
		// Stop everything and start over in this same sync.
		p.setRestartAll(pod.UID, p.clock.Now())
		killAll = killEverything(pod, ps, trigger)
		view = &container.PodStatus{UID: ps.UID, Name: ps.Name, Namespace: ps.Namespace, Sandboxes: ps.Sandboxes}
	}
	plan := Plan{Actions: computeActions(pod, view, probes, restarts)}
	plan.Actions.ContainersToKill = append(killAll, plan.Actions.ContainersToKill...)
	if plan.Actions.SandboxChanged {
		p.recorder.Event(pod, v1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
	}
	plan.Actions.InitContainersToStart = p.gate(pod, view, pod.Spec.InitContainers, plan.Actions.InitContainersToStart, &plan)
	plan.Actions.ContainersToStart = p.gate(pod, view, pod.Spec.Containers, plan.Actions.ContainersToStart, &plan)
	return plan
}

// gate returns the containers of idx (indexes into specs) that may start
// now; each one held back gets a BackOff event and a CrashLoopBackOff
// waiting reason in plan.
func (p *Planner) gate(pod *v1.Pod, ps *container.PodStatus, specs []v1.Container, idx []int, plan *Plan) []int {
	var out []int
	for _, i := range idx {
		c := &specs[i]
		delay, left, held := p.heldBack(pod, ps, c)
		if !held {
			out = append(out, i)
			continue
		}
		p.recorder.Eventf(pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s", c.Name, podDesc(pod))
		if plan.Waiting == nil {
			plan.Waiting = map[string]container.Waiting{}
		}
		plan.Waiting[c.Name] = container.Waiting{Reason: ReasonCrashLoopBackOff,
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", delay, c.Name, podDesc(pod))}
		if plan.RequeueAfter == 0 || left < plan.RequeueAfter {
			plan.RequeueAfter = left
		}
	}
	return out
}

// heldBack reports whether container c, about to be started, exited
// before and must wait out its back-off (its delay and what is left of it).
// A container allowed to restart moves its back-off one step on.
//
// Whatever ended the last attempt counts, as in the kubelet: an exit of its
// own, or a kill for a failed liveness or startup probe. A container killed
// in this very sync still shows as running, so the back-off is measured
// from the newest attempt that already exited: the first probe kill
// restarts at once, later ones wait 10 s, 20 s, ... up to 5 min and show
// CrashLoopBackOff meanwhile.
func (p *Planner) heldBack(pod *v1.Pod, ps *container.PodStatus, c *v1.Container) (delay, left time.Duration, held bool) {
	prev := newestExited(ps, c.Name)
	if prev == nil || prev.FinishedAt.IsZero() {
		return 0, 0, false // first start
	}
	key := backoffKey(pod, c)
	if delay, left, in := p.crashBackoff.InBackoffSince(key, prev.FinishedAt); in {
		return delay, left, true
	}
	p.crashBackoff.Next(key, prev.FinishedAt)
	return 0, 0, false
}

// newestExited returns the newest attempt of the named container that has
// exited, nil when none has.
func newestExited(ps *container.PodStatus, name string) *container.ContainerStatus {
	if ps == nil {
		return nil
	}
	var newest *container.ContainerStatus
	for _, c := range ps.Containers {
		if c.Name == name && c.State == container.StateExited && (newest == nil || c.CreatedAt.After(newest.CreatedAt)) {
			newest = c
		}
	}
	return newest
}

// backoffKey names a container's back-off: a changed spec starts afresh.
func backoffKey(pod *v1.Pod, c *v1.Container) string {
	return fmt.Sprintf("%s_%s_%s_%s_%x", pod.Name, pod.Namespace, pod.UID, c.Name, container.Hash(c))
}

// forgetOldBackoffs drops, at most once a minute, the back-off of
// containers that have not failed for long (deleted pods' among them).
func (p *Planner) forgetOldBackoffs() {
	p.mu.Lock()
	now := p.clock.Now()
	due := now.Sub(p.lastGC) >= time.Minute
	if due {
		p.lastGC = now
	}
	p.mu.Unlock()
	if due {
		p.crashBackoff.GC()
	}
}
