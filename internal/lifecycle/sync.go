package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podspec"
	"github.com/minilet/minilet/internal/podworkers"
	"github.com/minilet/minilet/internal/status"
)

// SyncerConfig holds the Syncer's dependencies.
type SyncerConfig struct {
	Pods    *Pods   // required
	Runtime Runtime // required
	Cgroups Cgroups // required
	Prober  Prober  // required
	// Publisher sends statuses to the cluster; nil in standalone mode.
	Publisher Publisher
	// Volumes sets up pod volumes before containers start and removes
	// them once the pod is gone; nil = pods have no volumes to prepare.
	Volumes Volumes
	// HostIP is the node's IP, shown as each pod's status.hostIP.
	HostIP string
	// Resize carries out in-place resizes; nil = a pod runs whatever
	// resources its spec asks for, changed only when its containers are
	// next created.
	Resize *ResizeConfig
	// Recorder default: drops events. Clock default: the real clock.
	// Logger default: discards. Metrics default: none.
	Recorder Recorder
	Clock    clock.Clock
	Logger   *slog.Logger
	Metrics  Metrics
}

// Syncer runs the steps of one pod's life on the pod's worker: sync it to
// its spec, terminate it, release what it held. Steps of different pods run
// in parallel; the workers never run two steps of one pod at once.
type Syncer struct {
	cfg       SyncerConfig
	log       *slog.Logger
	statusGen status.Generator
	planner   *Planner
	allocs    allocations
}

var _ podworkers.Syncer = (*Syncer)(nil)

// NewSyncer returns a Syncer; it rejects a config without a required
// dependency, naming the field.
func NewSyncer(cfg SyncerConfig) (*Syncer, error) {
	switch {
	case cfg.Pods == nil:
		return nil, fmt.Errorf("lifecycle syncer: field Pods is required")
	case cfg.Runtime == nil:
		return nil, fmt.Errorf("lifecycle syncer: field Runtime is required")
	case cfg.Cgroups == nil:
		return nil, fmt.Errorf("lifecycle syncer: field Cgroups is required")
	case cfg.Prober == nil:
		return nil, fmt.Errorf("lifecycle syncer: field Prober is required")
	}
	cfg = withDefaults(cfg)
	return &Syncer{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "lifecycle"),
		statusGen: status.Generator{HostIP: cfg.HostIP, Probes: cfg.Prober},
		planner:   NewPlanner(cfg.Clock, cfg.Recorder),
	}, nil
}

func withDefaults(cfg SyncerConfig) SyncerConfig {
	if cfg.Recorder == nil {
		cfg.Recorder = nopRecorder{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopMetrics{}
	}
	return cfg
}

// SyncPod makes the runtime match one pod's spec and publishes the status
// that results. It reports whether the pod reached a terminal phase and,
// when something waits (a back-off, a failed start), how soon to sync again.
func (s *Syncer) SyncPod(ctx context.Context, pod *v1.Pod) (terminal bool, requeueAfter time.Duration, err error) {
	defer s.observe("sync", s.cfg.Clock.Now())
	rs, err := s.cfg.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return false, 0, fmt.Errorf("reading runtime status of pod %s: %w", podRef(pod), err)
	}
	st := s.generate(pod, rs, nil)
	if isTerminal(st.Phase) {
		s.publish(ctx, pod, st)
		return true, 0, nil
	}
	if exceeded, _ := activeDeadline(pod, st, s.cfg.Clock.Now()); exceeded {
		s.endAtDeadline(ctx, pod, st)
		return true, 0, nil
	}
	// From here on the pod runs as allocated: a resize its spec asks for
	// applies once it fits the node.
	run, alloc := s.allocate(pod)
	updates, restarts := s.resizeActions(run, alloc, rs)
	resizeErr := s.resizeInPlace(ctx, run, updates, len(restarts) > 0)
	// A container a resize restarts keeps its old bound until it is
	// replaced: the pod cgroup then gets its new values after that (below).
	if err := s.ensureCgroupUnless(len(restarts) > 0, run); err != nil {
		// The cgroup manager records the FailedCreatePodContainer event.
		s.cfg.Pods.setStatus(pod.UID, st)
		return false, 0, fmt.Errorf("ensuring the cgroup of pod %s: %w", podRef(pod), err)
	}
	if err := s.setupVolumes(ctx, run, rs, st); err != nil {
		s.cfg.Pods.setStatus(pod.UID, st)
		s.publish(ctx, pod, st)
		return false, 0, err
	}
	if err := s.cfg.Prober.AddPod(run); err != nil {
		s.log.Warn("probes not started", "pod", podRef(pod), "err", err)
	}

	plan := s.planner.Plan(run, rs, s.cfg.Prober, restarts)
	res := s.cfg.Runtime.SyncPod(ctx, run, rs, plan.Actions)
	if len(restarts) > 0 {
		if err := s.cfg.Cgroups.EnsurePod(run); err != nil {
			res.Err = errors.Join(res.Err, fmt.Errorf("resizing the cgroup of pod %s: %w", podRef(pod), err))
			res.Requeue(resizeRetry)
		}
	}
	for name, w := range plan.Waiting {
		res.Wait(name, w.Reason, w.Message)
	}
	res.Requeue(plan.RequeueAfter)
	if resizeErr != nil {
		res.Err = errors.Join(res.Err, resizeErr)
		res.Requeue(resizeRetry)
	}
	if alloc.pending != nil {
		res.Requeue(resizeRetry) // a deferred resize may fit later
	}

	if fresh, err := s.cfg.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace); err == nil {
		rs = fresh
	}
	st = s.generate(run, rs, res.Waiting)
	s.resizeStatus(&st, pod, run, alloc, rs)
	if !isTerminal(st.Phase) {
		exceeded, left := activeDeadline(pod, st, s.cfg.Clock.Now())
		if exceeded { // reached during this sync
			s.endAtDeadline(ctx, pod, st)
			return true, 0, nil
		}
		res.Requeue(left) // the deadline is acted on when it comes
	}
	s.publish(ctx, pod, st)
	s.markStarted(pod, st)
	if isTerminal(st.Phase) {
		return true, 0, nil
	}
	return false, res.RequeueAfter, res.Err
}

// ensureCgroupUnless is EnsurePod of pod unless later is set (the
// pod's cgroup exists and gets its values after the sync's restarts).
func (s *Syncer) ensureCgroupUnless(later bool, pod *v1.Pod) error {
	if later {
		return nil
	}
	return s.cfg.Cgroups.EnsurePod(pod)
}

// endAtDeadline ends a pod that outlived its activeDeadlineSeconds: it
// publishes st as Failed/DeadlineExceeded and records the event. The
// worker goes on to stop the pod with its grace period (SyncPod reports it
// terminal), and the status keeps that phase, reason and message.
func (s *Syncer) endAtDeadline(ctx context.Context, pod *v1.Pod, st v1.PodStatus) {
	s.log.Info("pod exceeded its active deadline", "pod", podRef(pod), "activeDeadlineSeconds", *pod.Spec.ActiveDeadlineSeconds)
	s.cfg.Recorder.Event(pod, v1.EventTypeNormal, ReasonDeadlineExceeded, MessageDeadlineExceeded)
	s.publish(ctx, pod, deadlineExceeded(st))
}

// SyncTerminatingPod stops every container of the pod, with gracePeriod
// (nil: the pod's own), and publishes the status it ends with.
func (s *Syncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, gracePeriod *int64) error {
	defer s.observe("kill", s.cfg.Clock.Now())
	s.cfg.Prober.StopLivenessAndStartup(pod)
	rs, err := s.cfg.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return fmt.Errorf("reading runtime status of pod %s: %w", podRef(pod), err)
	}
	if err := s.cfg.Runtime.KillPod(ctx, pod, rs, gracePeriod); err != nil {
		return fmt.Errorf("killing pod %s: %w", podRef(pod), err)
	}
	if fresh, err := s.cfg.Runtime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace); err == nil {
		rs = fresh
	}
	st := s.generate(pod, rs, nil)
	if final, ok := s.cfg.Pods.finalStatus(pod.UID); ok {
		st = endWith(final, st)
	} else if !isTerminal(st.Phase) && (pod.DeletionTimestamp == nil || !podspec.IsStatic(pod)) {
		// Everything is stopped now. A static pod that was deleted is
		// shown by its deletion timestamp; any other pod ends
		// Succeeded when every container exited 0, else Failed, as the
		// kubelet does.
		st.Phase = stoppedPhase(st)
	}
	s.publish(ctx, pod, st)
	return nil
}

// SyncTerminatedPod releases what a stopped pod held on the node: its
// probe workers and its cgroup.
func (s *Syncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod) error {
	s.cfg.Prober.RemovePod(pod)
	s.allocs.forget(pod.UID)
	s.planner.Forget(pod.UID)
	if err := s.cfg.Cgroups.RemovePod(ctx, pod.UID); err != nil {
		return fmt.Errorf("removing the cgroup of pod %s: %w", podRef(pod), err)
	}
	if s.cfg.Volumes != nil {
		if err := s.cfg.Volumes.Teardown(pod.UID); err != nil {
			return fmt.Errorf("removing the volumes of pod %s: %w", podRef(pod), err)
		}
	}
	return nil
}

// setupVolumes makes the pod's volumes ready (and their content current)
// before containers start, as the kubelet's volume manager does. A failure
// is a FailedMount event; it holds back a pod that has no running
// container yet, while a running pod keeps running on what it has.
func (s *Syncer) setupVolumes(ctx context.Context, pod *v1.Pod, rs *container.PodStatus, st v1.PodStatus) error {
	if s.cfg.Volumes == nil || len(pod.Spec.Volumes) == 0 {
		return nil
	}
	withStatus := pod.DeepCopy() // the downward API reads the pod's IPs
	withStatus.Status = st
	err := s.cfg.Volumes.Setup(ctx, withStatus)
	if err == nil {
		return nil
	}
	s.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedMount", "MountVolume.SetUp failed for %s", err)
	if anyRunning(rs) {
		s.log.Warn("volume content not refreshed; the pod keeps what it has", "pod", podRef(pod), "err", err)
		return nil
	}
	return fmt.Errorf("unmounted volumes of pod %s: %w", podRef(pod), err)
}

func anyRunning(rs *container.PodStatus) bool {
	if rs == nil {
		return false
	}
	for _, c := range rs.Containers {
		if c.State == container.StateRunning {
			return true
		}
	}
	return false
}

// endWith is the status of a pod stopped with a status decided for it
// (evicted): that phase, reason, message and conditions, with the
// containers, times and addresses as they ended.
func endWith(final, st v1.PodStatus) v1.PodStatus {
	final.ContainerStatuses, final.InitContainerStatuses = st.ContainerStatuses, st.InitContainerStatuses
	final.StartTime, final.HostIP, final.HostIPs = st.StartTime, st.HostIP, st.HostIPs
	final.PodIP, final.PodIPs, final.QOSClass = st.PodIP, st.PodIPs, st.QOSClass
	return final
}

// stoppedPhase is the phase of a pod whose containers were all stopped:
// Succeeded when every app container exited 0, else Failed.
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

// generate computes a pod's status from what the runtime holds, on top of
// its last status.
func (s *Syncer) generate(pod *v1.Pod, rs *container.PodStatus, waiting map[string]container.Waiting) v1.PodStatus {
	var prev *v1.PodStatus
	if p, ok := s.cfg.Pods.GetPodStatus(pod.UID); ok {
		prev = &p
	}
	// Containers a restart of all of them has not reached yet wait for
	// their turn; their last attempt is their last termination.
	for name, w := range s.planner.restartAllWaiting(pod, rs) {
		if _, set := waiting[name]; !set {
			if waiting == nil {
				waiting = map[string]container.Waiting{}
			}
			waiting[name] = w
		}
	}
	return s.statusGen.Generate(pod, rs, prev, waiting, s.cfg.Clock.Now())
}

// publish records a pod's status and sends it to the cluster.
func (s *Syncer) publish(ctx context.Context, pod *v1.Pod, st v1.PodStatus) {
	s.cfg.Pods.setStatus(pod.UID, st)
	if s.cfg.Publisher != nil {
		s.cfg.Publisher.PublishStatus(ctx, pod, st)
	}
}

// markStarted reports the pod's start latency, from when this run first
// saw the pod, the first time all of its containers run. A pod whose
// containers a previous run started (adopted after a restart) has no
// start latency to report.
func (s *Syncer) markStarted(pod *v1.Pod, st v1.PodStatus) {
	if st.Phase != v1.PodRunning || len(st.ContainerStatuses) == 0 {
		return
	}
	seen, ok := s.cfg.Pods.firstSeen(pod.UID)
	if !ok {
		return
	}
	for _, c := range st.ContainerStatuses {
		if c.State.Running == nil {
			return
		}
		if c.State.Running.StartedAt.Time.Before(seen.Truncate(time.Second)) {
			s.cfg.Pods.firstStart(pod.UID) // started before this run
			return
		}
	}
	if s.cfg.Pods.firstStart(pod.UID) {
		s.cfg.Metrics.ObservePodStart(max(s.cfg.Clock.Since(seen), 0))
	}
}

func (s *Syncer) observe(op string, start time.Time) {
	s.cfg.Metrics.ObserveSync(op, s.cfg.Clock.Since(start))
}

// podRef names a pod in logs and errors: namespace/name.
func podRef(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// podDesc names a pod the way the kubelet's event messages do:
// name_namespace(uid).
func podDesc(p *v1.Pod) string { return fmt.Sprintf("%s_%s(%s)", p.Name, p.Namespace, p.UID) }
