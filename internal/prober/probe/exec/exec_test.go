package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	osexec "os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/prober/probe"
)

// hostExecer runs the command on the host, as the embedded runtime's
// ExecSync does (the container ID is ignored): a real process, killed with
// its process group when the timeout passes.
type hostExecer struct{}

func (hostExecer) ExecSync(ctx context.Context, _ container.ID, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := osexec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ctx.Err() != nil {
		return out.Bytes(), errb.Bytes(), -1, fmt.Errorf("exec %v: %w", cmd, ctx.Err())
	}
	var exitErr *osexec.ExitError
	if errors.As(err, &exitErr) {
		return out.Bytes(), errb.Bytes(), int32(exitErr.ExitCode()), nil
	}
	return out.Bytes(), errb.Bytes(), 0, err
}

func TestProbe(t *testing.T) {
	tests := []struct {
		name       string
		cmd        []string
		want       probe.Result
		wantOutput string
		wantErr    bool
	}{
		{"exit 0 is success", []string{"sh", "-c", "echo healthy"}, probe.Success, "healthy\n", false},
		{"nonzero exit is failure with stdout and stderr", []string{"sh", "-c", "echo out; echo broken >&2; exit 3"}, probe.Failure, "out\nbroken\n", false},
		{"command outliving the timeout is a failure", []string{"sleep", "30"}, probe.Failure, `command ["sleep" "30"] timed out`, false},
		{"missing binary is an error, not a failure", []string{"/nonexistent/minilet-probe"}, probe.Unknown, "", true},
		{"empty command is an error", nil, probe.Unknown, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := 10 * time.Second
			if tt.cmd != nil && tt.cmd[0] == "sleep" {
				timeout = time.Second
			}
			got, out, err := Probe(context.Background(), hostExecer{}, container.ID{Type: "test", ID: "c1"}, tt.cmd, timeout)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want || (tt.wantOutput != "" && out != tt.wantOutput) {
				t.Fatalf("Probe = %v %q, want %v %q", got, out, tt.want, tt.wantOutput)
			}
		})
	}
}

func TestProbeOutputIsCapped(t *testing.T) {
	got, out, err := Probe(context.Background(), hostExecer{}, container.ID{Type: "test", ID: "c1"}, []string{"sh", "-c", "head -c 50000 /dev/zero | tr '\\0' x; exit 1"}, 10*time.Second)
	if err != nil || got != probe.Failure {
		t.Fatalf("Probe = %v, %v", got, err)
	}
	if len(out) != probe.MaxOutput || strings.Trim(out, "x") != "" {
		t.Fatalf("output is %d bytes, want %d bytes of x", len(out), probe.MaxOutput)
	}
}

func TestProbeTimeoutViaErrTimedOut(t *testing.T) {
	e := execerFunc(func() error { return fmt.Errorf("runtime says: %w", ErrTimedOut) })
	got, out, err := Probe(context.Background(), e, container.ID{Type: "test", ID: "c1"}, []string{"true"}, 10*time.Second)
	if err != nil || got != probe.Failure || !strings.Contains(out, "timed out") {
		t.Fatalf("Probe = %v %q %v, want a timed-out failure", got, out, err)
	}
}

// execerFunc stands in for a runtime adapter that reports its own timeout
// error; the real adapter is in the integrator's code.
type execerFunc func() error

func (f execerFunc) ExecSync(context.Context, container.ID, []string, time.Duration) ([]byte, []byte, int32, error) {
	return nil, nil, -1, f()
}
