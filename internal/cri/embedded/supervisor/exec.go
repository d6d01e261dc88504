package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"
	utilexec "k8s.io/utils/exec"
)

// maxExecOutput caps what ExecSync keeps of each output stream, like other
// runtimes do (16 MiB).
const maxExecOutput = 16 << 20

// AttachStdin connects to the stdin of a running container created with
// Stdin; what is written to the connection reaches the container, and
// closing it ends a StdinOnce container's input.
func (s *Supervisor) AttachStdin(containerID string) (net.Conn, error) {
	c, err := s.Get(containerID)
	if err != nil {
		return nil, err
	}
	if !c.Stdin {
		return nil, fmt.Errorf("attach to the stdin of container %s: it was not created with stdin: true: %w", containerID, errdefs.ErrInvalidArgument)
	}
	if c.State() != Running {
		return nil, fmt.Errorf("attach to container %s: container is not running: %w", containerID, errdefs.ErrConflict)
	}
	path, d, err := monitorproc.SocketPath(filepath.Join(s.dir, containerID), monitorproc.FileAttach)
	if err != nil {
		return nil, fmt.Errorf("attach to container %s: %w", containerID, err)
	}
	defer func() { _ = d.Close() }()
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("attach to the stdin of container %s: %w", containerID, err)
	}
	return conn, nil
}

// Stdio is where a command run in a container reads and writes. Nil
// streams are not connected. With TTY the command gets a terminal: its
// output (stdout and stderr alike) goes to Out, and Resize changes its size.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
	TTY      bool
	Resize   <-chan TermSize
}

// TermSize is a terminal's size in characters.
type TermSize struct{ Width, Height uint16 }

// Exec runs cmd in the container's environment (its env, working
// directory, cgroups and, for a container from an image, its namespaces and
// root; for a host-image container with mounts, its mount namespace) and returns its output, each stream cut at 16 MiB. A non-zero exit
// is returned as a k8s.io/utils/exec.CodeExitError (as the kubelet's CRI
// client does); a timeout as an error wrapping context.DeadlineExceeded; a
// command that cannot be run (missing binary) as an error classified
// NotFound.
func (s *Supervisor) Exec(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	var stdout, stderr capBuffer
	err := s.ExecStream(ctx, containerID, cmd, timeout, Stdio{Out: &stdout, Err: &stderr})
	return stdout.Bytes(), stderr.Bytes(), err
}

// ExecStream runs cmd as Exec does, with the given standard streams, until
// it exits, the timeout (0 = none) passes or ctx ends (which kill it). The
// timeout counts from the moment the command itself starts: entering the
// container (the trampoline) is not part of it.
func (s *Supervisor) ExecStream(ctx context.Context, containerID string, cmd []string, timeout time.Duration, stdio Stdio) error {
	if len(cmd) == 0 {
		return fmt.Errorf("exec in container %s: field cmd is required: %w", containerID, errdefs.ErrInvalidArgument)
	}
	c, err := s.Get(containerID)
	if err != nil {
		return err
	}
	if c.State() != Running {
		return fmt.Errorf("exec in container %s: container is not running: %w", containerID, errdefs.ErrConflict)
	}
	rec, pid := c.Record, c.Start.Pid

	// The trampoline joins the cgroups and then execs cmd; argv holds the
	// cgroup directories, "--", and the command.
	n, err := cgroupName(rec.CgroupPath)
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", containerID, err)
	}
	report, reportW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer func() { _ = report.Close() }()
	args := []string{monitorproc.TrampolineArg0}
	for _, d := range s.cg.Dirs(n) {
		args = append(args, d.Path)
	}
	args = append(append(args, "--"), cmd...)
	proc := &exec.Cmd{
		Path:        s.trampoline(),
		Args:        args,
		Env:         append(append([]string{}, rec.Env...), monitorproc.TrampolineEnv+"=1"),
		Dir:         rec.WorkingDir,
		Stdin:       stdio.In,
		Stdout:      stdio.Out,
		Stderr:      stdio.Err,
		ExtraFiles:  []*os.File{reportW},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		WaitDelay:   time.Second,
	}
	var term *terminal
	if stdio.TTY {
		if term, err = openTerminal(proc, stdio); err != nil {
			_ = reportW.Close()
			return fmt.Errorf("exec in container %s: %w", containerID, err)
		}
		defer term.close()
	}
	switch {
	case rec.Rootfs != nil:
		// The trampoline enters the container's namespaces and root.
		proc.Dir = ""
		proc.Env = append(proc.Env, monitorproc.TrampolinePidEnv+"="+strconv.Itoa(pid), monitorproc.TrampolineDirEnv+"="+rec.WorkingDir)
	case len(rec.Mounts) > 0 || !rec.Pod.Empty() || rec.Security != nil:
		// The trampoline enters the container's namespaces, the mount one
		// where the working directory may be one of its volumes.
		proc.Dir = ""
		proc.Env = append(proc.Env, monitorproc.TrampolineMntEnv+"="+strconv.Itoa(pid), monitorproc.TrampolineDirEnv+"="+rec.WorkingDir)
	}
	if rec.Security != nil {
		// The command is confined as the container is.
		proc.Env = append(proc.Env, monitorproc.TrampolineSecEnv+"="+monitorproc.EncodeExecSecurity(rec.Security))
	}
	err = proc.Start()
	_ = reportW.Close()
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", containerID, err)
	}
	if term != nil {
		term.started()
	}
	waited := make(chan error, 1)
	go func() { waited <- proc.Wait() }()
	// The timeout measures the command, as the kubelet's does: its clock
	// starts once the trampoline is done setting up (the report pipe closes
	// when it execs or starts the command), not when it was launched.
	setup := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(report); setup <- b }()
	var (
		waitErr   error
		failure   []byte
		setupDone bool
		timer     *time.Timer
		deadline  <-chan time.Time
		timedOut  bool
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for running := true; running; {
		select {
		case waitErr = <-waited:
			running = false
		case failure = <-setup:
			setupDone = true
			if timeout > 0 && len(failure) == 0 {
				timer = time.NewTimer(timeout)
				deadline = timer.C
			}
		case <-deadline:
			timedOut = true
			_ = syscall.Kill(-proc.Process.Pid, syscall.SIGKILL)
			waitErr, running = <-waited, false
		case <-ctx.Done():
			timedOut = true
			_ = syscall.Kill(-proc.Process.Pid, syscall.SIGKILL)
			waitErr, running = <-waited, false
		}
	}
	if term != nil {
		term.drain()
	}
	if !setupDone {
		failure = <-setup
	}
	if len(failure) > 0 {
		return fmt.Errorf("exec %q in container %s: %s: %w", strings.Join(cmd, " "), containerID, failure, errdefs.ErrNotFound)
	}
	if timedOut {
		if ctx.Err() != nil {
			return fmt.Errorf("exec %q in container %s: %w", strings.Join(cmd, " "), containerID, ctx.Err())
		}
		// errors.Is(err, context.DeadlineExceeded), and gRPC code DeadlineExceeded
		// as the kubelet's CRI client expects from a remote runtime.
		return fmt.Errorf("exec %q in container %s timed out after %s: %w",
			strings.Join(cmd, " "), containerID, timeout, context.DeadlineExceeded)
	}
	// The command is done; a client that keeps its stdin open must not
	// hold the answer back (WaitDelay closed the pipes).
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		waitErr = nil
		if !proc.ProcessState.Success() {
			waitErr = &exec.ExitError{ProcessState: proc.ProcessState}
		}
	}
	var exitErr *exec.ExitError
	if errors.As(waitErr, &exitErr) {
		code := exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		msg := fmt.Sprintf("command %q exited with %d", strings.Join(cmd, " "), code)
		if b, ok := stdio.Err.(*capBuffer); ok {
			msg += ": " + string(b.Bytes())
		}
		return utilexec.CodeExitError{Err: errors.New(msg), Code: code}
	}
	if waitErr != nil {
		return fmt.Errorf("exec in container %s: %w", containerID, waitErr)
	}
	return nil
}

// trampoline is the program exec starts to enter the container: the exec
// helper (cmd/minilet-exec, a freestanding C program that starts in a
// fraction of any Go program's CPU) when there is one, else the monitor
// binary or the agent, which have the trampoline role too.
func (s *Supervisor) trampoline() string { return s.execHelper }

// capBuffer keeps the first maxExecOutput bytes written to it.
type capBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := maxExecOutput - b.buf.Len(); room > 0 {
		if len(p) > room {
			b.buf.Write(p[:room])
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}

func (b *capBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}
