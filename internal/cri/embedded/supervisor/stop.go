package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"
)

// Timeouts of the supervisor's own waits.
const (
	killTimeout    = 30 * time.Second // a SIGKILLed container is reported exited
	logWaitTimeout = 10 * time.Second // a reopened log file appears
)

// sigReopen asks a monitor to reopen the container's log file.
const sigReopen = syscall.SIGUSR1

// Stop sends the container's stop signal (the image's, default SIGTERM) to
// its process group, SIGKILL to everything in its cgroup after timeout
// seconds (at once when timeout is 0, or when ctx ends), and returns once
// the exit is recorded. Stopping a container that is not running is a
// no-op.
func (s *Supervisor) Stop(ctx context.Context, id string, timeout int64) error {
	s.mu.Lock()
	c, ok := s.containers[id]
	if !ok {
		s.mu.Unlock()
		return errNotFound(id)
	}
	start, exited, done, stopSignal, rec := c.start, c.exited, c.exit != nil, c.rec.StopSignal, c.rec
	s.mu.Unlock()
	if start == nil || done || start.Error != "" {
		return nil
	}
	// Only the container's own process is signalled: a PID from its start
	// record that now names another process is left alone (its cgroup,
	// which holds nothing else, is killed below).
	var ctr monitorproc.ProcID
	if s.containerRunning(&rec, start) {
		ctr = start.Container()
	}
	if timeout > 0 {
		_, _ = ctr.SignalGroup(parseStopSignal(stopSignal))
		t := time.NewTimer(time.Duration(timeout) * time.Second)
		select {
		case <-exited:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	_, _ = ctr.SignalGroup(syscall.SIGKILL)
	if n, err := cgroupName(c.rec.CgroupPath); err == nil {
		_ = s.cg.Kill(n)
	}
	s.kickWatcher()
	t := time.NewTimer(killTimeout)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
		return fmt.Errorf("stop container %s: no exit recorded %s after SIGKILL: %w", id, killTimeout, errdefs.ErrUnavailable)
	}
}

// Remove kills the container if it still runs and deletes it, its cgroup
// and its state (not its log, which the kubelet manages). Removing an
// unknown container is not an error.
func (s *Supervisor) Remove(ctx context.Context, id string) error {
	c, err := s.get(id)
	if err != nil {
		return nil
	}
	if err := s.Stop(ctx, id, 0); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	s.mu.Lock()
	starting := c.starting && c.start == nil
	s.mu.Unlock()
	if starting {
		return fmt.Errorf("remove container %s: it is being started: %w", id, errdefs.ErrConflict)
	}
	if err := s.removeCgroup(c.rec.CgroupPath); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	s.mu.Lock()
	delete(s.containers, id)
	s.mu.Unlock()
	s.log.Info("container removed", "container", id, "name", c.rec.Name)
	return nil
}

// UpdateResources records new limits and writes them into the container's
// cgroup if it runs.
func (s *Supervisor) UpdateResources(id string, res *Resources) error {
	s.mu.Lock()
	c, ok := s.containers[id]
	if !ok {
		s.mu.Unlock()
		return errNotFound(id)
	}
	running := c.snapshot().State() == Running
	rec := c.rec
	rec.Resources = res
	s.mu.Unlock()
	if running {
		n, err := cgroupName(rec.CgroupPath)
		if err == nil {
			err = s.cg.Update(n, cgroupResources(res))
		}
		if err != nil {
			return fmt.Errorf("update resources of container %s: %w", id, err)
		}
	}
	if err := statefile.Write(filepath.Join(c.dir, fileContainer), rec); err != nil {
		return fmt.Errorf("update resources of container %s: %w", id, err)
	}
	s.mu.Lock()
	c.rec.Resources = res
	s.mu.Unlock()
	return nil
}

// ReopenLog makes the monitor reopen the container's log file (after the
// kubelet rotated it) and returns once the new file exists.
func (s *Supervisor) ReopenLog(ctx context.Context, id string) error {
	s.mu.Lock()
	c, ok := s.containers[id]
	if !ok {
		s.mu.Unlock()
		return errNotFound(id)
	}
	start, running, logFile := c.start, c.snapshot().State() == Running, c.rec.LogFile
	s.mu.Unlock()
	if !running || !monitorAlive(start) {
		return fmt.Errorf("reopen log of container %s: container is not running: %w", id, errdefs.ErrConflict)
	}
	if logFile == "" {
		return fmt.Errorf("reopen log of container %s: container has no log path: %w", id, errdefs.ErrConflict)
	}
	if ok, err := start.Monitor().Signal(sigReopen); err != nil || !ok {
		return fmt.Errorf("reopen log of container %s: signal its monitor (pid %d): %w", id, start.MonitorPid, errors.Join(err, errdefs.ErrConflict))
	}
	if err := pollUntil(ctx, logWaitTimeout, func() bool { _, err := os.Stat(logFile); return err == nil }); err != nil {
		return fmt.Errorf("reopen log of container %s: log file %s did not reappear: %w", id, logFile, err)
	}
	return nil
}

// parseStopSignal reads an image's StopSignal ("SIGQUIT", "QUIT" or "3");
// anything else is SIGTERM.
func parseStopSignal(s string) syscall.Signal {
	if s == "" {
		return syscall.SIGTERM
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n)
	}
	if s = strings.ToUpper(s); !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	if sig := unix.SignalNum(s); sig != 0 {
		return sig
	}
	return syscall.SIGTERM
}

// pollUntil checks cond every 10ms until it holds, ctx ends or timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return context.DeadlineExceeded
		case <-tick.C:
		}
	}
	return nil
}
