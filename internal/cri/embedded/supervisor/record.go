package supervisor

import "github.com/minilet/minilet/internal/cri/embedded/monitorproc"

// Files in a container's state directory besides the monitor's
// (monitorproc.FileSpec, FileStart, FileExit).
const (
	fileContainer = "container.json" // Record, written by the agent
	fileMonLog    = "monitor.log"    // the monitor's own stderr
	dirRootfs     = "rootfs"         // the writable layer of a container from an image
)

// Resources are the cgroup settings of a container. Zero fields are not
// set (CRI: 0 means "not specified").
type Resources struct {
	CPUShares       int64  `json:"cpuShares,omitempty"`
	CPUQuota        int64  `json:"cpuQuota,omitempty"`
	CPUPeriod       int64  `json:"cpuPeriod,omitempty"`
	MemoryLimit     int64  `json:"memoryLimit,omitempty"`
	MemorySwapLimit int64  `json:"memorySwapLimit,omitempty"`
	PidsLimit       int64  `json:"pidsLimit,omitempty"`
	OOMScoreAdj     *int64 `json:"oomScoreAdj,omitempty"`
}

// Rootfs is how a container from an image gets its root filesystem: the
// image's layers under a writable layer of its own, in its own mount, PID,
// UTS and IPC namespaces.
type Rootfs struct {
	Layers []string                `json:"layers"` // diffIDs, base first
	Copy   bool                    `json:"copy"`   // a private copy instead of an overlay mount
	Mounts []monitorproc.BindMount `json:"mounts,omitempty"`
}

// Record is the durable, agent-written state of a container; its run state
// comes from the monitor's start and exit records.
type Record struct {
	ID          string            `json:"id"`
	SandboxID   string            `json:"sandboxId"`
	Name        string            `json:"name"`
	Attempt     uint32            `json:"attempt"`
	Image       string            `json:"image"`                // as requested
	ImageID     string            `json:"imageId,omitempty"`    // empty for the host image
	Rootfs      *Rootfs           `json:"rootfs,omitempty"`     // nil for the host image
	StopSignal  string            `json:"stopSignal,omitempty"` // the image's, e.g. "SIGQUIT"; default SIGTERM
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	LogPath     string            `json:"logPath,omitempty"` // as given (relative to the sandbox log dir)
	LogFile     string            `json:"logFile,omitempty"` // absolute
	Args        []string          `json:"args"`
	Env         []string          `json:"env,omitempty"`
	WorkingDir  string            `json:"workingDir,omitempty"`
	Resources   *Resources        `json:"resources,omitempty"`
	CgroupPath  string            `json:"cgroupPath"`          // <parent>/<id>, relative to each hierarchy
	Stdin       bool              `json:"stdin,omitempty"`     // stdin kept open for attach
	StdinOnce   bool              `json:"stdinOnce,omitempty"` // closed when the first attach ends
	CreatedAt   int64             `json:"createdAt"`

	// Mounts are a host-image container's CRI mounts, bound in a mount
	// namespace of its own (a container from an image has them in Rootfs).
	Mounts []monitorproc.BindMount `json:"mounts,omitempty"`

	// Pod is what the container shares with its pod: its namespaces.
	Pod monitorproc.PodNamespaces `json:"pod,omitempty"`
	// Security is how the container is confined (user, capabilities,
	// seccomp, read-only root...), whatever its image.
	Security *monitorproc.Security `json:"security,omitempty"`
}

// ImageRef is the image ID containers report: the config digest, or the
// image as requested (the host image).
func (rec *Record) ImageRef() string {
	if rec.ImageID != "" {
		return rec.ImageID
	}
	return rec.Image
}

// State is where a container is in its life.
type State int

// The states, in order.
const (
	Created State = iota
	Running
	Exited
)

// Container is a snapshot of a container: its record and what its monitor
// reported. Its fields are not to be modified.
type Container struct {
	Record
	// Start is the monitor's report that the container runs (or failed to
	// start); nil before.
	Start *monitorproc.StartRecord
	// Exit is the final word on the container; nil before.
	Exit *monitorproc.ExitRecord
	// StateLost, set on a running container this run re-adopted after its
	// state was lost, says what was lost and what was done; "" otherwise.
	StateLost string
}

// State derives the state from the monitor's records.
func (c Container) State() State {
	switch {
	case c.Exit != nil:
		return Exited
	case c.Start != nil:
		return Running
	default:
		return Created
	}
}
