package supervisor

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/minilet/minilet/internal/errdefs"
)

// MonitorBinaryName is the file name of the small monitor binary
// (cmd/minilet-monitor) looked for next to the agent's executable.
const MonitorBinaryName = "minilet-monitor"

// ExecHelperBinaryName is the file name of the exec helper
// (cmd/minilet-exec), looked for next to the monitor binary or the agent.
const ExecHelperBinaryName = "minilet-exec"

// selfExe re-executes the running agent binary, whose main runs
// monitorproc.MaybeRun first: a monitor when no monitor binary is
// installed, and the exec trampoline always.
const selfExe = "/proc/self/exe"

// MonitorExecutable chooses the program monitors are started from: the
// configured path, else MonitorBinaryName next to self (the agent's
// executable), else a re-exec of the agent itself.
func MonitorExecutable(configured, self string) (string, error) {
	if configured != "" {
		if !isExecutableFile(configured) {
			return "", fmt.Errorf("embedded runtime config: field MonitorPath %q is not an executable file: %w", configured, errdefs.ErrInvalidArgument)
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

// ExecHelperExecutable chooses the program execs enter containers
// through: the configured path, else ExecHelperBinaryName next to the
// monitor binary (monitor, as MonitorExecutable chose it) or next to self,
// else the monitor itself (its trampoline speaks the same protocol, at a Go
// program's start-up cost per exec).
func ExecHelperExecutable(configured, monitor, self string) (string, error) {
	if configured != "" {
		if !isExecutableFile(configured) {
			return "", fmt.Errorf("embedded runtime config: field ExecHelperPath %q is not an executable file: %w", configured, errdefs.ErrInvalidArgument)
		}
		return configured, nil
	}
	for _, next := range []string{monitor, self} {
		if next == "" || next == selfExe {
			continue
		}
		if p := filepath.Join(filepath.Dir(next), ExecHelperBinaryName); isExecutableFile(p) {
			return p, nil
		}
	}
	return monitor, nil
}

func isExecutableFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
