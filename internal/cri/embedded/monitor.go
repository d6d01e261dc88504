package embedded

import (
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/cri/embedded/supervisor"
)

// MonitorBinaryName is the file name of the small monitor binary
// (cmd/minilet-monitor) the runtime looks for next to the agent's
// executable.
const MonitorBinaryName = supervisor.MonitorBinaryName

// ExecHelperBinaryName is the file name of the exec helper binary
// (cmd/minilet-exec), looked for next to the monitor binary or the agent's
// executable (see Config.ExecHelperPath).
const ExecHelperBinaryName = supervisor.ExecHelperBinaryName

// MaybeRunMonitor must be the first call in main() and in the TestMain of
// every test binary that uses this runtime. In the agent it returns at once;
// in a process the runtime re-executed as a container monitor, container
// init or exec trampoline it does that job and exits without returning. (A
// monitor started from the small cmd/minilet-monitor binary runs the same
// code; this is the fallback when that binary is not installed.)
func MaybeRunMonitor() { monitorproc.MaybeRun() }
