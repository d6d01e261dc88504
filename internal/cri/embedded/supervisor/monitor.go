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

func isExecutableFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
