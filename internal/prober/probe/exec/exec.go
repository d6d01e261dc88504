// Package exec runs exec probes: a command inside the container, through
// the runtime's ExecSync. Exit code 0 is success, anything else failure,
// and a command that outlives the probe timeout is a failure too.
package exec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/prober/probe"
)

// Execer runs a command in a container and waits for it. The integrator
// adapts the CRI RuntimeService.ExecSync to it (CRI takes id.ID). When the command outlives
// timeout, ExecSync must return an error that wraps
// context.DeadlineExceeded or ErrTimedOut.
type Execer interface {
	ExecSync(ctx context.Context, id container.ID, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error)
}

// ErrTimedOut may be wrapped by an Execer to say the command timed out.
var ErrTimedOut = errors.New("command timed out")

// setupAllowance is how much longer than the probe timeout the context
// given to the Execer lives. The timeout is the command's (the runtime
// measures it from the moment the command starts, as the kubelet's
// runtimes do); entering the container before that is not part of it and
// may take long on a loaded machine. The context is only a backstop, as
// long as the kubelet's (its default --runtime-request-timeout, 2 min).
const setupAllowance = 2 * time.Minute

// Probe runs cmd in the container and classifies the outcome. The output is
// stdout followed by stderr, capped at probe.MaxOutput.
func Probe(ctx context.Context, e Execer, id container.ID, cmd []string, timeout time.Duration) (probe.Result, string, error) {
	if len(cmd) == 0 {
		return probe.Unknown, "", errors.New("exec probe: command is empty")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+setupAllowance)
	defer cancel()
	stdout, stderr, code, err := e.ExecSync(ctx, id, cmd, timeout)
	out := make([]byte, 0, len(stdout)+len(stderr))
	out = append(append(out, probe.Truncate(stdout)...), probe.Truncate(stderr)...)
	output := string(probe.Truncate(out))
	if err != nil {
		if errors.Is(err, ErrTimedOut) || errors.Is(err, context.DeadlineExceeded) {
			return probe.Failure, fmt.Sprintf("command %q timed out", cmd), nil
		}
		return probe.Unknown, output, fmt.Errorf("exec probe in container %s: %w", id, err)
	}
	if code != 0 {
		return probe.Failure, output, nil
	}
	return probe.Success, output, nil
}
