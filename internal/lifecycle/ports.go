package lifecycle

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/podworkers"
)

// Runtime is the container runtime as a pod's sync sees it: what the pod
// has, and the hands that change it (internal/kuberuntime).
type Runtime interface {
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error)
	// SyncPod carries out acts, decided on ps.
	SyncPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, acts container.PodActions) container.SyncResult
	// KillPod stops every container and the sandbox, with the pod's grace
	// period unless gracePeriodOverride is set.
	KillPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, gracePeriodOverride *int64) error
}

// RuntimeCleaner is the runtime as housekeeping sees it: every pod it
// holds, and the removal of dead containers.
type RuntimeCleaner interface {
	GetPods(ctx context.Context) ([]*container.Pod, error)
	GarbageCollect(ctx context.Context, keepPerContainer int, isPodGone func(types.UID) bool) error
}

// PodWorkers runs each pod's steps, one at a time per pod
// (internal/podworkers).
type PodWorkers interface {
	UpdatePod(pod *v1.Pod)
	KillPod(pod *v1.Pod, gracePeriod *int64)
	Resync(uid types.UID)
}

// WorkerRegistry tells which pods have a worker, and drops the worker of
// a pod that finished terminating.
type WorkerRegistry interface {
	Known() map[types.UID]podworkers.Phase
	// Forget reports false while the pod has not fully terminated.
	Forget(uid types.UID) bool
}

// Workers is both views of the pod workers.
type Workers interface {
	PodWorkers
	WorkerRegistry
}

// Cgroups places a pod in its cgroup before it runs and removes the cgroup
// once nothing runs in it (internal/cm).
type Cgroups interface {
	EnsurePod(pod *v1.Pod) error
	RemovePod(ctx context.Context, uid types.UID) error
}

// CgroupCleaner removes pod cgroups no pod owns any more.
type CgroupCleaner interface {
	CleanupOrphans(ctx context.Context, keep map[types.UID]bool) error
}

// ProbeWorkers starts and stops a pod's probe workers (internal/prober).
type ProbeWorkers interface {
	AddPod(pod *v1.Pod) error
	StopLivenessAndStartup(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
}

// ProbeResults says which running containers failed a probe that restarts
// them, and which passed their startup probe (a sidecar that has not holds
// back the containers after it).
type ProbeResults interface {
	LivenessFailed(id container.ID) bool
	StartupFailed(id container.ID) bool
	StartupSucceeded(id container.ID) bool
}

// ProbeStatus fills in ready and started in a generated status.
type ProbeStatus interface {
	UpdatePodStatus(pod *v1.Pod, s *v1.PodStatus)
}

// Prober is everything the core asks of the prober.
type Prober interface {
	ProbeWorkers
	ProbeResults
	ProbeStatus
	// CleanupPods stops the workers of pods not in desired.
	CleanupPods(desired map[types.UID]struct{})
}

// Admitter decides whether a new pod may run, given the pods already
// admitted and running. On a rejection, reason and message are the pod's
// status reason and message (and its Warning event's), in the kubelet's
// words (OutOfcpu, UnexpectedAdmissionError, Evicted, ...).
type Admitter interface {
	Admit(ctx context.Context, pod *v1.Pod, active []*v1.Pod) (ok bool, reason, message string)
}

// AdmitFunc adapts a function to Admitter.
type AdmitFunc func(ctx context.Context, pod *v1.Pod, active []*v1.Pod) (ok bool, reason, message string)

// Admit calls f.
func (f AdmitFunc) Admit(ctx context.Context, pod *v1.Pod, active []*v1.Pod) (bool, string, string) {
	return f(ctx, pod, active)
}

// Releaser is an Admitter that holds something for an admitted pod
// (devices, images kept from garbage collection). Release frees it when a
// later admitter rejects the pod, or once the pod is gone for good.
type Releaser interface {
	Release(uid types.UID)
}

// DeviceReconciler frees the devices of pods that are no longer active.
type DeviceReconciler interface {
	UpdateAllocatedDevices(active []*v1.Pod)
}

// StatusStore keeps each pod's last status across agent restarts, so a
// restarted agent starts from what it last published.
type StatusStore interface {
	Save(uid types.UID, st v1.PodStatus)
	Remove(uid types.UID)
	// Restored is the status the previous run saved.
	Restored(uid types.UID) (v1.PodStatus, bool)
}

// Publisher tells the cluster about pods (internal/cluster); nil in
// standalone mode. Its methods must not block on the network: the sync
// loop and the pod workers call them.
type Publisher interface {
	// PublishStatus sends a pod's new status (to its mirror pod for a
	// static pod, keeping the mirror in step).
	PublishStatus(ctx context.Context, pod *v1.Pod, st v1.PodStatus)
	// PodGone says a pod stopped for good: the API server may finish
	// deleting it, or a static pod's mirror goes.
	PodGone(ctx context.Context, pod *v1.Pod)
	// CleanupMirrors removes mirror pods whose static pod is not in
	// static (removed while the agent was down, or a mirror of another
	// version left when its static pod went). Called at every
	// housekeeping round.
	CleanupMirrors(ctx context.Context, static []*v1.Pod)
}

// Recorder records Kubernetes events (internal/events).
type Recorder interface {
	Event(obj runtime.Object, eventtype, reason, message string)
	Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// Metrics receives the kubelet-named measurements the core makes.
type Metrics interface {
	// ObserveSync is how long one worker step took (op: "sync" or
	// "kill", as the kubelet's pod_worker_duration_seconds).
	ObserveSync(op string, d time.Duration)
	// ObservePodStart is a pod's start latency: creation to all
	// containers running, once per pod.
	ObservePodStart(d time.Duration)
	// SetCounts sets the running pods and the containers by state
	// (running, exited, created).
	SetCounts(runningPods int, containers map[string]int)
}
