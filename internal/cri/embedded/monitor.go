package embedded

import (
	"os"
	"path/filepath"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

// The monitor's process side lives in the monitorproc package, which the
// small cmd/minilet-monitor binary is built from; these names are the
// runtime's view of the same protocol.
type (
	monitorSpec = monitorproc.Spec
	startRecord = monitorproc.StartRecord
	exitRecord  = monitorproc.ExitRecord
	cgroupDir   = monitorproc.CgroupDir
	rootfsSpec  = monitorproc.RootfsSpec
	userSpec    = monitorproc.UserSpec
	bindMount   = monitorproc.BindMount
)

// Environment markers and argv[0] of the helper processes.
const (
	monitorEnv       = monitorproc.MonitorEnv
	monitorArg0      = monitorproc.MonitorArg0
	trampolineEnv    = monitorproc.TrampolineEnv
	trampolineArg0   = monitorproc.TrampolineArg0
	trampolinePidEnv = monitorproc.TrampolinePidEnv
	trampolineDirEnv = monitorproc.TrampolineDirEnv
)

// State files in a container's directory.
const (
	fileContainer = "container.json"      // containerRecord, written by the agent
	fileSpec      = monitorproc.FileSpec  // monitorSpec, written by the agent before start
	fileStart     = monitorproc.FileStart // startRecord, written by the monitor
	fileExit      = monitorproc.FileExit  // exitRecord, written by the monitor (or the agent if the monitor vanished)
	fileMonLog    = "monitor.log"         // the monitor's own stderr
)

// Reasons reported in ContainerStatus.
const (
	reasonCompleted  = monitorproc.ReasonCompleted
	reasonError      = monitorproc.ReasonError
	reasonOOMKilled  = monitorproc.ReasonOOMKilled
	reasonStartError = monitorproc.ReasonStartError
)

// defaultPath is the PATH containers on the host image get unless their
// config sets one.
const defaultPath = monitorproc.DefaultPath

// MonitorBinaryName is the file name of the small monitor binary
// (cmd/minilet-monitor) the runtime looks for next to the agent's
// executable.
const MonitorBinaryName = "minilet-monitor"

// MaybeRunMonitor must be the first call in main() and in the TestMain of
// every test binary that uses this runtime. In the agent it returns at once;
// in a process the runtime re-executed as a container monitor, container
// init or exec trampoline it does that job and exits without returning. (A
// monitor started from the small cmd/minilet-monitor binary runs the same
// code; this is the fallback when that binary is not installed.)
func MaybeRunMonitor() { monitorproc.MaybeRun() }

func procStartTicks(pid int) (uint64, bool) { return monitorproc.ProcStartTicks(pid) }

// monitorExecutable chooses the program monitors are started from: the
// configured path, else MonitorBinaryName next to self (the agent's
// executable), else a re-exec of the agent itself, which MaybeRunMonitor
// handles.
func monitorExecutable(configured, self string) (string, error) {
	if configured != "" {
		if !isExecutableFile(configured) {
			return "", errInvalid("embedded runtime config: field MonitorPath %q is not an executable file", configured)
		}
		return configured, nil
	}
	if self != "" {
		if p := filepath.Join(filepath.Dir(self), MonitorBinaryName); isExecutableFile(p) {
			return p, nil
		}
	}
	return selfExe, nil
}

// selfExe re-executes the running agent binary.
const selfExe = "/proc/self/exe"

func isExecutableFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
