package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/pleg"
	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/status"
)

// Snapshot is the full set of pods one source wants now.
type Snapshot struct {
	Source string
	Pods   []*v1.Pod
	// Mirrors, from the API server's source (podspec.SourceAPI) only, is
	// the full set of mirror pods it holds for the node's static pods
	// (read only).
	Mirrors []*v1.Pod
}

// LoopConfig holds the Loop's dependencies.
type LoopConfig struct {
	Pods    *Pods          // required
	Workers Workers        // required
	Runtime RuntimeCleaner // required
	Prober  interface {
		CleanupPods(desired map[types.UID]struct{})
	} // required
	Cgroups CgroupCleaner    // required
	Devices DeviceReconciler // required
	// Admitters decide, in order, whether a new pod may run; the first
	// rejection wins. Those that are Releasers get Release when a later
	// one rejects the pod and once the pod is gone.
	Admitters []Admitter
	// Sources names every pod source (podspec.SourceFile, ...). Pods the
	// runtime holds count as orphans only once each has sent a snapshot.
	Sources []string
	// Publisher tells the cluster about pods; nil in standalone mode.
	Publisher Publisher
	// Volumes removes the volumes of pods gone while nobody watched
	// (e.g. deleted while the agent was down); nil = none to clean.
	Volumes Volumes
	// Recorder default: drops events. Clock default: the real clock.
	// Logger default: discards. Metrics default: none.
	Recorder Recorder
	Clock    clock.WithTicker
	Logger   *slog.Logger
	Metrics  Metrics
}

// Loop is the sync loop: the one goroutine that decides what happens to
// pods. Everything that observes the world (sources, PLEG, probes, the
// workers finishing a termination) reports into it; it admits, starts,
// updates and stops pods by handing them to the pod workers. Its Handle
// methods are single steps, which Run calls as inputs arrive and tests
// call directly.
type Loop struct {
	cfg LoopConfig
	log *slog.Logger

	// Owned by the loop goroutine.
	sourcesSeen  map[string]bool
	readd        map[types.UID]*v1.Pod     // leaving pods to run again once gone
	mirrorsAsked map[types.UID]mirrorState // static pods synced for an out-of-step mirror
	lastGC       time.Time

	// entered is when Run last began an iteration (unix nanoseconds, 0
	// before the first): the kubelet's sync-loop monitor, read by health
	// checks from other goroutines.
	entered atomic.Int64
}

// NewLoop returns a Loop; it rejects a config without a required
// dependency, naming the field.
func NewLoop(cfg LoopConfig) (*Loop, error) {
	switch {
	case cfg.Pods == nil:
		return nil, fmt.Errorf("lifecycle loop: field Pods is required")
	case cfg.Workers == nil:
		return nil, fmt.Errorf("lifecycle loop: field Workers is required")
	case cfg.Runtime == nil:
		return nil, fmt.Errorf("lifecycle loop: field Runtime is required")
	case cfg.Prober == nil:
		return nil, fmt.Errorf("lifecycle loop: field Prober is required")
	case cfg.Cgroups == nil:
		return nil, fmt.Errorf("lifecycle loop: field Cgroups is required")
	case cfg.Devices == nil:
		return nil, fmt.Errorf("lifecycle loop: field Devices is required")
	}
	d := withDefaults(SyncerConfig{Recorder: cfg.Recorder, Logger: cfg.Logger, Metrics: cfg.Metrics})
	cfg.Recorder, cfg.Logger, cfg.Metrics = d.Recorder, d.Logger, d.Metrics
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Loop{
		cfg:          cfg,
		log:          cfg.Logger.With("component", "syncloop"),
		sourcesSeen:  map[string]bool{},
		readd:        map[types.UID]*v1.Pod{},
		mirrorsAsked: map[types.UID]mirrorState{},
	}, nil
}

// Inputs are what the loop reacts to.
type Inputs struct {
	Snapshots  <-chan Snapshot
	Runtime    <-chan pleg.Event // a container started or died
	Probes     <-chan types.UID  // a probe result changed
	Terminated <-chan types.UID  // a pod's worker finished terminating it
	Objects    <-chan types.UID  // a ConfigMap or Secret the pod reads changed
}

// housekeepingPeriod is how often the loop forgets finished pods, stops
// orphans and runs the periodic cleanups, as the kubelet's 2 s.
const housekeepingPeriod = 2 * time.Second

// Run reads the inputs until ctx ends.
func (l *Loop) Run(ctx context.Context, in Inputs) {
	tick := l.cfg.Clock.NewTicker(housekeepingPeriod)
	defer tick.Stop()
	for {
		l.entered.Store(l.cfg.Clock.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case s := <-in.Snapshots:
			l.HandleSnapshot(ctx, s)
		case e := <-in.Runtime:
			l.HandleEvent(e.PodUID)
		case uid := <-in.Probes:
			l.HandleEvent(uid)
		case uid := <-in.Objects:
			l.HandleEvent(uid)
		case uid := <-in.Terminated:
			l.HandleTerminated(ctx, uid)
		case <-tick.C():
			l.Housekeeping(ctx)
		}
	}
}

// LastIteration is when the loop last began an iteration (zero before
// Run). The housekeeping tick wakes it every 2 s, so a time far in the past
// means a handler is stuck.
func (l *Loop) LastIteration() time.Time {
	ns := l.entered.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// HealthThreshold is how long the loop may go without an iteration before
// it counts as stuck, as the kubelet's sync-loop health check: twice the
// sync frequency, and at least five minutes.
func HealthThreshold(syncFrequency time.Duration) time.Duration {
	return max(2*syncFrequency, 5*time.Minute)
}

// Healthy reports an error when the loop has not begun an iteration within
// threshold of now.
func (l *Loop) Healthy(now time.Time, threshold time.Duration) error {
	last := l.LastIteration()
	if !last.IsZero() && now.Sub(last) > threshold {
		return fmt.Errorf("sync loop took longer than expected: no iteration for %s (limit %s)", now.Sub(last).Round(time.Second), threshold)
	}
	return nil
}

// HandleEvent asks the worker of a known pod to sync again now: the
// runtime or a probe saw something change.
func (l *Loop) HandleEvent(uid types.UID) {
	pods := l.cfg.Pods
	if pods.isRejected(uid) {
		return // a rejected pod never runs
	}
	p, ok := pods.Pod(uid)
	if !ok {
		return
	}
	if pods.isLeaving(uid) {
		l.cfg.Workers.Resync(uid)
		return
	}
	l.cfg.Workers.UpdatePod(p)
}

// HandleSnapshot diffs a source's new pod set against what the loop has
// from it: removals first (so their resources are free for admission),
// then new pods (admitted oldest first), then updates. The API server's
// snapshot also shows the static pods' mirrors: a static pod whose mirror
// went out of step syncs at once.
func (l *Loop) HandleSnapshot(ctx context.Context, u Snapshot) {
	pods := l.cfg.Pods
	want := map[types.UID]*v1.Pod{}
	for _, p := range u.Pods {
		want[p.UID] = p
	}
	for _, old := range pods.fromSource(u.Source) {
		if _, still := want[old.UID]; !still {
			l.removePod(old)
		}
	}
	for uid, p := range l.readd {
		if _, still := want[uid]; !still && p.Annotations[podspec.AnnotationConfigSource] == u.Source {
			delete(l.readd, uid)
		}
	}
	var added []*v1.Pod
	for _, p := range u.Pods {
		if p.DeletionTimestamp != nil {
			// Deleted in the API server: terminate gracefully; the
			// deletion is finished once the pod has stopped.
			if !pods.isLeaving(p.UID) {
				l.deletePod(p)
			}
			continue
		}
		cur, known := pods.Pod(p.UID)
		switch {
		case !known:
			added = append(added, p)
		case pods.isLeaving(p.UID):
			// Restored while still terminating (same content, same
			// UID): run it again once the old copy is gone.
			l.readd[p.UID] = p
		case !pods.isRejected(p.UID):
			keepCreationTime(p, cur)
			pods.setDesired(p)
			if specChanged(cur, p) {
				l.cfg.Workers.UpdatePod(p)
			}
		}
	}
	sortPods(added)
	for _, p := range added {
		l.addPod(ctx, p)
	}
	if u.Source == podspec.SourceAPI {
		l.checkMirrors(u.Mirrors)
	}
	l.sourcesSeen[u.Source] = true
	pods.sourceSpoke(u.Source)
}

// keepCreationTime gives a re-read pod without a creation time (a static
// pod's manifest read again) the one the agent gave it when it first came,
// so that its age, and what is measured from it, survive the re-read.
func keepCreationTime(p, cur *v1.Pod) {
	if p.CreationTimestamp.IsZero() {
		p.CreationTimestamp = cur.CreationTimestamp
	}
}

// specChanged reports whether a source sent a pod that differs from the
// one the worker has.
func specChanged(cur, p *v1.Pod) bool {
	return cur.Generation != p.Generation || cur.ResourceVersion != p.ResourceVersion || !maps.Equal(cur.Annotations, p.Annotations)
}

// addPod admits a new pod and starts its worker, or records why it was
// rejected: the pod then ends Failed with the rejection's reason and never
// runs.
func (l *Loop) addPod(ctx context.Context, pod *v1.Pod) {
	now := l.cfg.Clock.Now()
	if pod.CreationTimestamp.IsZero() {
		// A static pod has no creation time of its own: the first time
		// it was seen, by this run or (its saved start time) the last.
		pod.CreationTimestamp = metav1.NewTime(now)
		if st, ok := l.cfg.Pods.GetPodStatus(pod.UID); ok && st.StartTime != nil && !st.StartTime.IsZero() && st.StartTime.Time.Before(now) {
			pod.CreationTimestamp = *st.StartTime
		}
	}
	l.cfg.Pods.markSeen(pod.UID, now)
	active := l.cfg.Pods.Active()
	l.cfg.Pods.setDesired(pod)
	if ok, reason, msg := l.admit(ctx, pod, active); !ok {
		l.log.Info("pod rejected", "pod", podRef(pod), "reason", reason, "message", msg)
		l.cfg.Recorder.Event(pod, v1.EventTypeWarning, reason, msg)
		st := status.Failed(pod, reason, msg, l.cfg.Clock.Now())
		l.cfg.Pods.reject(pod.UID, st)
		// The API server learns it too: a controller replaces a pod that
		// ended Failed, never one left Pending.
		if l.cfg.Publisher != nil {
			l.cfg.Publisher.PublishStatus(ctx, pod, st)
		}
		return
	}
	l.cfg.Workers.UpdatePod(pod)
}

// admit runs the admitters in order; on a rejection, the ones that
// admitted the pod already let go of what they hold for it.
func (l *Loop) admit(ctx context.Context, pod *v1.Pod, active []*v1.Pod) (ok bool, reason, message string) {
	for i, a := range l.cfg.Admitters {
		if ok, reason, message := a.Admit(ctx, pod, active); !ok {
			release(l.cfg.Admitters[:i], pod.UID)
			return false, reason, message
		}
	}
	return true, "", ""
}

func release(admitters []Admitter, uid types.UID) {
	for _, a := range admitters {
		if r, ok := a.(Releaser); ok {
			r.Release(uid)
		}
	}
}

// deletePod terminates a pod the API server deleted, with the grace
// period it asked for.
func (l *Loop) deletePod(pod *v1.Pod) {
	if _, known := l.cfg.Pods.Pod(pod.UID); !known {
		l.cfg.Pods.setDesired(pod)
	}
	l.cfg.Pods.markLeaving(pod)
	l.cfg.Workers.KillPod(pod, pod.DeletionGracePeriodSeconds)
}

// removePod starts the termination of a pod its source let go of.
func (l *Loop) removePod(pod *v1.Pod) {
	if l.cfg.Pods.isRejected(pod.UID) {
		l.cfg.Pods.forget(pod.UID)
		return
	}
	now := metav1.NewTime(l.cfg.Clock.Now())
	leaving := pod.DeepCopy()
	leaving.DeletionTimestamp = &now
	l.cfg.Pods.markLeaving(leaving)
	l.cfg.Workers.KillPod(leaving, nil)
}

// HandleTerminated forgets a pod that finished terminating after its
// source let go of it, and runs it again if its source brought it back
// meanwhile.
func (l *Loop) HandleTerminated(ctx context.Context, uid types.UID) {
	pods := l.cfg.Pods
	if !pods.isLeaving(uid) || !l.cfg.Workers.Forget(uid) {
		return
	}
	if p, ok := pods.Pod(uid); ok && l.cfg.Publisher != nil {
		l.cfg.Publisher.PodGone(ctx, p)
	}
	pods.forget(uid)
	release(l.cfg.Admitters, uid)
	if p, ok := l.readd[uid]; ok {
		delete(l.readd, uid)
		l.addPod(ctx, p)
	}
}

// Evict returns what the eviction manager calls to stop a pod it chose:
// the pod is terminated with grace seconds and ends with status st
// (Failed, Evicted, and the eviction's message and conditions).
func Evict(pods *Pods, w PodWorkers) func(pod *v1.Pod, st v1.PodStatus, grace int64) error {
	return func(pod *v1.Pod, st v1.PodStatus, grace int64) error {
		pods.setFinal(pod.UID, st)
		w.KillPod(pod, &grace)
		return nil
	}
}
