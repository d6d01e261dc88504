// Package monitorproc is the process side of the embedded runtime's
// container monitor: the code that runs inside the per-container monitor
// process, the container init it starts for containers from images, and the
// exec trampoline. It imports only the standard library,
// golang.org/x/sys/unix and internal packages that do the same (the cgroup
// driver, state files), so that the small cmd/minilet-monitor binary built
// from it starts fast and stays small; the agent binary runs the same code
// when it re-executes itself (embedded.MaybeRunMonitor).
//
// The contract with the agent: the monitor is started with argv[0]
// MonitorArg0, the environment variable MonitorEnv set to the container's
// state directory (which holds the Spec in FileSpec), and fd 3 a pipe on
// which it writes one byte once it wrote the StartRecord (FileStart). It
// writes the ExitRecord (FileExit) when the container ends.
package monitorproc

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Environment markers that turn an execution of the agent or monitor binary
// into a monitor (value: the container's state directory) or an exec
// trampoline.
const (
	MonitorEnv    = "MINILET_EMBEDDED_MONITOR"
	TrampolineEnv = "MINILET_EMBEDDED_EXEC"
	// TrampolinePidEnv and TrampolineDirEnv (prefixed like TrampolineEnv, so
	// never passed on) make the exec trampoline enter a container from an
	// image: its PID 1 as the host sees it, and the working directory.
	TrampolinePidEnv = TrampolineEnv + "_PID"
	TrampolineDirEnv = TrampolineEnv + "_DIR"
	// TrampolineMntEnv makes the exec trampoline enter the mount namespace
	// of a host-image container with mounts (value: its process as the
	// host sees it), in TrampolineDirEnv.
	TrampolineMntEnv = TrampolineEnv + "_MNT"
	// TrampolineSecEnv makes the exec trampoline confine the command as
	// the container is (value: the container's Security as
	// EncodeExecSecurity writes it).
	TrampolineSecEnv = TrampolineEnv + "_SEC"
)

// argv[0] of the helper processes.
const (
	MonitorArg0    = "minilet-monitor"
	TrampolineArg0 = "minilet-exec"
)

// State files in a container's directory written or read by the monitor.
const (
	FileSpec  = "monitor.json" // Spec, written by the agent before start
	FileStart = "start.json"   // StartRecord, written by the monitor
	FileExit  = "exit.json"    // ExitRecord, written by the monitor (or the agent if the monitor vanished)
	// FileAttach is the unix socket whose connections feed the container's
	// stdin (containers created with Stdin only).
	FileAttach = "attach.sock"
)

// Reasons reported in ContainerStatus.
const (
	ReasonCompleted  = "Completed"
	ReasonError      = "Error"
	ReasonOOMKilled  = "OOMKilled"
	ReasonStartError = "StartError"
	// ReasonStateLost marks a container whose monitor or state files were
	// lost: exited (killed, or its exit unknown) or re-adopted while
	// running. Its message names what was lost and what was done; the
	// kubelet side turns it into a Warning event of the same reason.
	ReasonStateLost = "ContainerStateLost"
)

// DefaultPath is the PATH containers on the host image get unless their
// config sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Spec tells the monitor what to run.
type Spec struct {
	Args        []string    `json:"args"`
	Env         []string    `json:"env"`
	WorkingDir  string      `json:"workingDir"`
	LogPath     string      `json:"logPath"` // absolute; empty discards output
	CgroupDirs  []CgroupDir `json:"cgroupDirs"`
	MemoryDir   string      `json:"memoryDir"` // memory cgroup dir, for OOM detection
	CgroupV2    bool        `json:"cgroupV2"`
	OOMScoreAdj *int64      `json:"oomScoreAdj,omitempty"`
	// Stdin keeps the container's stdin open, fed by connections to
	// FileAttach; with StdinOnce it closes when the first one ends.
	Stdin     bool `json:"stdin,omitempty"`
	StdinOnce bool `json:"stdinOnce,omitempty"`
	// Rootfs, when set, runs the container from an image: through the
	// container init, in its own namespaces and root filesystem.
	Rootfs *RootfsSpec `json:"rootfs,omitempty"`
	// Mounts are a host-image container's CRI mounts: when there are any,
	// the container init binds them onto the host's tree in a new mount
	// namespace of the container's own. (A container from an image has
	// them in Rootfs.)
	Mounts []BindMount `json:"mounts,omitempty"`
	// Pod names the pod namespaces the container joins.
	Pod PodNamespaces `json:"pod,omitempty"`
	// MonitorCgroupDirs are the cgroups the monitor moves itself into
	// before anything else: its own, outside the agent's, so that whatever
	// ends the agent's cgroup (a service manager) does not end it.
	MonitorCgroupDirs []CgroupDir `json:"monitorCgroupDirs,omitempty"`
	// Security confines the container (any image); nil leaves a
	// host-image container as the monitor starts it: root with every
	// capability, in the host's namespaces.
	Security *Security `json:"security,omitempty"`
}

// PodNamespaces are the namespaces a container shares with its pod.
type PodNamespaces struct {
	// Join are the held namespace files (kind "net", "uts" or "ipc" →
	// path) the container init enters; a kind absent is the host's.
	Join map[string]string `json:"join,omitempty"`
	// HostPID keeps a container from an image in the host's PID
	// namespace (hostPID) instead of one of its own.
	HostPID bool `json:"hostPID,omitempty"`
	// HeldUnder is the directory holding every pod's namespace files: a
	// host-image container's mount namespace drops its copies of those
	// mounts, so that it keeps no other pod's namespace alive.
	HeldUnder string `json:"heldUnder,omitempty"`
}

// Empty reports whether the container shares nothing with a pod that
// needs the container init (all the host's namespaces).
func (p PodNamespaces) Empty() bool { return len(p.Join) == 0 }

// CgroupDir is a container's cgroup in one hierarchy: Dir the cgroup
// directory, Root the hierarchy's mount, Controller one of its controllers
// (v1; empty for the v2 unified hierarchy), by which the monitor finds its
// own cgroup there.
type CgroupDir struct {
	Dir        string `json:"dir"`
	Root       string `json:"root"`
	Controller string `json:"controller"`
}

// RootfsSpec is the part of the monitor spec the container init needs.
type RootfsSpec struct {
	Lower  []string    `json:"lower,omitempty"` // layer dirs, top first (overlay lowerdir order)
	Upper  string      `json:"upper,omitempty"`
	Work   string      `json:"work,omitempty"`
	Merged string      `json:"merged"`
	Copy   bool        `json:"copy,omitempty"`
	Mounts []BindMount `json:"mounts,omitempty"`
}

// UserSpec is who the container process runs as, resolved inside the
// container against its /etc/passwd and /etc/group.
type UserSpec struct {
	UID    *int64  `json:"uid,omitempty"`
	GID    *int64  `json:"gid,omitempty"`
	Name   string  `json:"name,omitempty"`  // user name, when UID is not given
	Group  string  `json:"group,omitempty"` // group name, when GID is not given
	Groups []int64 `json:"groups,omitempty"`
}

// BindMount is a CRI mount: a host path bound into the container.
type BindMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// HostToContainer keeps the mount a slave of the source's, so that
	// mounts the host makes below the source later show up in the
	// container; otherwise it is private.
	HostToContainer bool `json:"hostToContainer,omitempty"`
}

// StartRecord is the monitor's report that the container process runs (or
// could not be started).
type StartRecord struct {
	MonitorPid   int    `json:"monitorPid"`
	MonitorTicks uint64 `json:"monitorTicks"` // start time of the monitor, against pid reuse
	Pid          int    `json:"pid"`
	// Ticks is the container process's start time and BootID the boot it
	// runs in: with Pid they name it for good (see ProcID).
	Ticks     uint64 `json:"ticks,omitempty"`
	BootID    string `json:"bootId,omitempty"`
	StartedAt int64  `json:"startedAt"`
	Error     string `json:"error,omitempty"`
}

// Monitor names the monitor process that wrote the record.
func (r *StartRecord) Monitor() ProcID {
	return ProcID{Pid: r.MonitorPid, Ticks: r.MonitorTicks, BootID: r.BootID}
}

// Container names the container's main process.
func (r *StartRecord) Container() ProcID {
	return ProcID{Pid: r.Pid, Ticks: r.Ticks, BootID: r.BootID}
}

// ExitRecord is the final word on a container process.
type ExitRecord struct {
	ExitCode   int32  `json:"exitCode"`
	FinishedAt int64  `json:"finishedAt"`
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
}

// MaybeRun returns at once unless this process was started in one of the
// helper roles (monitor, exec trampoline, container init, pod pause); then it does
// that job and exits without returning. Both the environment marker and
// argv[0] must match, so that a stray variable never turns an agent into a
// monitor.
func MaybeRun() {
	if len(os.Args) == 0 {
		return
	}
	if dir := os.Getenv(MonitorEnv); dir != "" && os.Args[0] == MonitorArg0 {
		runtime.GOMAXPROCS(1)
		debug.SetGCPercent(20)
		os.Exit(runMonitor(dir))
	}
	if os.Getenv(TrampolineEnv) != "" && os.Args[0] == TrampolineArg0 {
		os.Exit(runTrampoline())
	}
	if os.Getenv(initEnv) != "" && os.Args[0] == initArg0 {
		os.Exit(runInit())
	}
	if os.Getenv(PauseEnv) != "" && os.Args[0] == PauseArg0 {
		runtime.GOMAXPROCS(1)
		os.Exit(runPause())
	}
}

// MaybeRunExec is MaybeRun for the exec trampoline role only: the Go
// build of cmd/minilet-exec, where its C program cannot be built.
func MaybeRunExec() {
	if len(os.Args) > 0 && os.Getenv(TrampolineEnv) != "" && os.Args[0] == TrampolineArg0 {
		os.Exit(runTrampoline())
	}
}

// ProcStartTicks returns the start time of pid (field 22 of /proc/pid/stat)
// and whether the process is alive (not a zombie).
func ProcStartTicks(pid int) (uint64, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, false
	}
	ticks, _ := strconv.ParseUint(f[19], 10, 64)
	return ticks, f[0] != "Z" && f[0] != "X"
}

// ProcBoundingSet is the capability bounding set of pid ("self" allowed).
func ProcBoundingSet(pid string) (uint64, error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapBnd in /proc/%s/status", pid)
}

// LookPath resolves a command like the container would: through the PATH of
// the container's environment.
func LookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("executable %q not found: %w", name, err)
		}
		return name, nil
	}
	pathVar := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in $PATH", name)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
