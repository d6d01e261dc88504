package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"

	"golang.org/x/sys/unix"
)

// Timeouts of the runtime's own waits.
const (
	monitorStartTimeout = 60 * time.Second // the monitor reports the container started
	killTimeout         = 30 * time.Second // a SIGKILLed container is reported exited
	logWaitTimeout      = 10 * time.Second // a reopened log file appears
)

// sigReopen asks a monitor to reopen the container's log file.
const sigReopen = syscall.SIGUSR1

// StartContainer creates the container's cgroup, applies its limits and
// launches its monitor, returning once the container process runs (or
// failed to start, which is an error and leaves the container EXITED with
// reason StartError).
func (r *Runtime) StartContainer(ctx context.Context, containerID string) error {
	r.mu.Lock()
	c, ok := r.containers[containerID]
	if !ok {
		r.mu.Unlock()
		return errNotFound("container %q", containerID)
	}
	if c.starting || c.start != nil || c.exit != nil {
		r.mu.Unlock()
		return errConflict("start container %s: it is not in the created state", containerID)
	}
	c.starting = true
	rec := c.rec
	r.mu.Unlock()

	launched, err := r.launch(c, &rec)
	if !launched {
		r.mu.Lock()
		c.starting = false
		r.mu.Unlock()
		return fmt.Errorf("start container %s (%s): %w", containerID, rec.Name, err)
	}
	start := r.loadStart(c.dir)
	if start == nil {
		// The monitor died before reporting; the watcher will not see it, so
		// record the failure here.
		msg := "the container's monitor exited before starting it"
		if err != nil {
			msg += ": " + err.Error()
		}
		start = &startRecord{StartedAt: time.Now().UnixNano(), Error: msg}
		_ = statefile.Write(filepath.Join(c.dir, fileStart), start)
		x := &exitRecord{ExitCode: 128, FinishedAt: start.StartedAt, Reason: reasonStartError, Message: msg}
		_ = statefile.Write(filepath.Join(c.dir, fileExit), x)
	}
	r.mu.Lock()
	c.start = start
	r.mu.Unlock()
	// The monitor may have ended before start was set, when the watcher
	// still ignored the container: look again.
	r.kickWatcher()
	if start.Error != "" {
		x := r.loadExit(c.dir)
		if x == nil {
			x = &exitRecord{ExitCode: 128, FinishedAt: start.StartedAt, Reason: reasonStartError, Message: start.Error}
		}
		r.setExit(c, x)
		return fmt.Errorf("start container %s (%s): %s", containerID, rec.Name, start.Error)
	}
	r.log.Info("container started", "container", containerID, "name", rec.Name, "pid", start.Pid, "monitorPid", start.MonitorPid)
	r.signalChange()
	return nil
}

// launch prepares the cgroup and spec and starts the monitor. It reports
// whether a monitor was started (after which its records are authoritative)
// and waits until the monitor reported back or exited.
func (r *Runtime) launch(c *container, rec *containerRecord) (bool, error) {
	dir := c.dir
	if rec.LogFile != "" {
		if err := os.MkdirAll(filepath.Dir(rec.LogFile), 0o755); err != nil {
			return false, fmt.Errorf("create log directory: %w", err)
		}
	}
	cg, err := cgroupName(rec.CgroupPath)
	if err != nil {
		return false, err
	}
	if err := r.cg.Create(cg, nil); err != nil {
		return false, err
	}
	if err := r.cg.Update(cg, cgroupResources(rec.Resources)); err != nil {
		_ = r.removeCgroup(rec.CgroupPath)
		return false, errInvalid("field linux.resources: %v", err)
	}
	spec := monitorSpec{
		Args: rec.Args, Env: rec.Env, WorkingDir: rec.WorkingDir, LogPath: rec.LogFile,
		MemoryDir: r.cg.Dir("memory", cg), CgroupV2: r.cg.Mode() == cgroups.ModeV2,
	}
	for _, d := range r.cg.Dirs(cg) {
		spec.CgroupDirs = append(spec.CgroupDirs, cgroupDir{Dir: d.Path, Root: d.Mount, Controller: d.Controller})
	}
	if rec.Rootfs != nil {
		spec.Rootfs = r.rootfsSpecFor(dir, rec.Rootfs)
	}
	if rec.Resources != nil && rec.Resources.OOMScoreAdj != nil {
		spec.OOMScoreAdj = rec.Resources.OOMScoreAdj
		if *spec.OOMScoreAdj < 0 {
			r.oomAdjWarning.Do(func() {
				r.log.Warn("negative oom_score_adj needs CAP_SYS_RESOURCE; it may not be applied", "container", rec.ID, "oomScoreAdj", *spec.OOMScoreAdj)
			})
		}
	}
	if err := statefile.WriteVolatile(filepath.Join(dir, fileSpec), spec); err != nil {
		return false, err
	}
	monLog, err := os.OpenFile(filepath.Join(dir, fileMonLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return false, err
	}
	defer func() { _ = monLog.Close() }()
	started, notify, err := os.Pipe()
	if err != nil {
		return false, err
	}
	defer func() { _ = started.Close() }()
	cmd := &exec.Cmd{
		Path:        r.monitor,
		Args:        []string{monitorArg0, shortID(rec.ID)},
		Env:         []string{monitorEnv + "=" + dir},
		Stdout:      monLog,
		Stderr:      monLog,
		ExtraFiles:  []*os.File{notify},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	_ = notify.Close()
	if err != nil {
		return false, fmt.Errorf("launch monitor: %w", err)
	}
	// Reap our child whenever it ends, even after Close; the kick makes the
	// watcher look at the container, which it does not poll.
	r.mu.Lock()
	c.child = true
	r.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		r.mu.Lock()
		c.monitorDone = true
		r.mu.Unlock()
		r.kickWatcher()
	}()
	_ = started.SetReadDeadline(time.Now().Add(monitorStartTimeout))
	var b [1]byte
	if _, err := started.Read(b[:]); err != nil {
		return true, fmt.Errorf("waiting for the monitor: %w", err)
	}
	return true, nil
}

// StopContainer sends SIGTERM to the container's process group, SIGKILL
// after timeout seconds, and returns once the exit is recorded. Stopping a
// container that is not running is a no-op.
func (r *Runtime) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	r.mu.Lock()
	c, ok := r.containers[containerID]
	if !ok {
		r.mu.Unlock()
		return errNotFound("container %q", containerID)
	}
	start, exited, done, stopSignal := c.start, c.exited, c.exit != nil, c.rec.StopSignal
	r.mu.Unlock()
	if start == nil || done || start.Error != "" {
		return nil
	}
	if timeout > 0 {
		signalGroup(start.Pid, parseStopSignal(stopSignal))
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
	signalGroup(start.Pid, syscall.SIGKILL)
	if n, err := cgroupName(c.rec.CgroupPath); err == nil {
		_ = r.cg.Kill(n)
	}
	r.kickWatcher()
	t := time.NewTimer(killTimeout)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
		return errUnavailable("stop container %s: no exit recorded %s after SIGKILL", containerID, killTimeout)
	}
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

// signalGroup signals the container's process group, or the process alone if
// it left its group.
func signalGroup(pid int, sig syscall.Signal) {
	if pid <= 0 {
		return
	}
	if err := syscall.Kill(-pid, sig); errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(pid, sig)
	}
}

func signalProcess(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	return nil
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
