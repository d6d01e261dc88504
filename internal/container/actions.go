package container

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// PodActions is what one sync does to a pod, as the lifecycle core decided
// it from the spec, the runtime's view, probe results and restart back-off.
// The runtime manager carries it out in order: kill the pod (or the
// containers to kill), create the sandbox, start init containers, start
// app containers.
type PodActions struct {
	// KillPod stops every running container and the sandbox.
	KillPod bool
	// CreateSandbox makes a new sandbox (after KillPod when it replaces
	// a dead one: SandboxChanged).
	CreateSandbox  bool
	SandboxChanged bool
	// SandboxID is the ready sandbox to start containers in when no new
	// one is created.
	SandboxID string
	// Attempt is the new sandbox's attempt number.
	Attempt uint32
	// InitContainersToStart and ContainersToStart index the pod spec.
	InitContainersToStart []int
	ContainersToStart     []int
	// EphemeralContainersToStart index spec.ephemeralContainers: each is
	// started once, in a running pod, and never again.
	EphemeralContainersToStart []int
	// ContainersToKill are running containers to stop (and maybe restart).
	ContainersToKill []ContainerToKill
}

// ContainerToKill is a running container the sync stops.
type ContainerToKill struct {
	ID   ID
	Name string
	Spec *v1.Container
	// Message is the Killing event's message.
	Message string
	// Reason is "liveness" or "startup" for a failed probe, "" for a
	// changed spec.
	Reason string
}

// Waiting is why a container that should run is not running
// (CrashLoopBackOff, ErrImagePull, CreateContainerConfigError, ...). It
// overrides the container's state in the generated status.
type Waiting struct {
	Reason  string
	Message string
}

// SyncResult is the outcome of carrying out PodActions.
type SyncResult struct {
	// RequeueAfter, when positive, is when the pod should be synced
	// again (an image pull back-off ends, a failed start is retried).
	RequeueAfter time.Duration
	// Waiting says, per container name, why a container that should run
	// is not running.
	Waiting map[string]Waiting
	// Err joins the failures of this sync (runtime errors, failed creates
	// and starts); back-off alone is not an error.
	Err error
}

// Wait records why the named container is not running.
func (r *SyncResult) Wait(name, reason, message string) {
	if r.Waiting == nil {
		r.Waiting = map[string]Waiting{}
	}
	r.Waiting[name] = Waiting{Reason: reason, Message: message}
}

// Requeue asks for a sync after d, keeping the soonest request.
func (r *SyncResult) Requeue(d time.Duration) {
	if d > 0 && (r.RequeueAfter == 0 || d < r.RequeueAfter) {
		r.RequeueAfter = d
	}
}
