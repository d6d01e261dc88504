package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"
)

// monitorStartTimeout bounds the wait for a monitor to report the
// container started.
const monitorStartTimeout = 60 * time.Second

// Create records a new container: its state directory, its writable layer
// (for a container from an image) and its record. Start runs it.
func (s *Supervisor) Create(rec Record) error {
	dir := filepath.Join(s.dir, rec.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if rec.Rootfs != nil {
		if err := s.prepareRootfs(dir, rec.Rootfs); err != nil {
			_ = os.RemoveAll(dir)
			return fmt.Errorf("writable layer: %w", err)
		}
	}
	if err := statefile.Write(filepath.Join(dir, fileContainer), rec); err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	s.mu.Lock()
	s.containers[rec.ID] = &container{rec: rec, dir: dir, exited: make(chan struct{})}
	s.mu.Unlock()
	s.log.Info("container created", "container", rec.ID, "name", rec.Name, "sandbox", rec.SandboxID)
	return nil
}

// Start creates the container's cgroup, applies its limits and launches
// its monitor, returning once the container process runs (or failed to
// start, which is an error and leaves the container exited with reason
// StartError).
func (s *Supervisor) Start(id string) error {
	s.mu.Lock()
	c, ok := s.containers[id]
	if !ok {
		s.mu.Unlock()
		return errNotFound(id)
	}
	if c.starting || c.start != nil || c.exit != nil {
		s.mu.Unlock()
		return fmt.Errorf("start container %s: it is not in the created state: %w", id, errdefs.ErrConflict)
	}
	c.starting = true
	rec := c.rec
	s.mu.Unlock()

	launched, err := s.launch(c, &rec)
	if !launched {
		s.mu.Lock()
		c.starting = false
		s.mu.Unlock()
		return fmt.Errorf("start container %s (%s): %w", id, rec.Name, err)
	}
	start := s.loadStart(c.dir)
	if start == nil {
		// The monitor died before reporting; the watcher will not see it, so
		// record the failure here.
		msg := "the container's monitor exited before starting it"
		if err != nil {
			msg += ": " + err.Error()
		}
		start = &monitorproc.StartRecord{StartedAt: time.Now().UnixNano(), Error: msg}
		_ = statefile.Write(filepath.Join(c.dir, monitorproc.FileStart), start)
		x := &monitorproc.ExitRecord{ExitCode: 128, FinishedAt: start.StartedAt, Reason: monitorproc.ReasonStartError, Message: msg}
		_ = statefile.Write(filepath.Join(c.dir, monitorproc.FileExit), x)
	}
	s.mu.Lock()
	c.start = start
	s.mu.Unlock()
	// The monitor may have ended before start was set, when the watcher
	// still ignored the container: look again.
	s.kickWatcher()
	if start.Error != "" {
		x := s.loadExit(c.dir)
		if x == nil {
			x = &monitorproc.ExitRecord{ExitCode: 128, FinishedAt: start.StartedAt, Reason: monitorproc.ReasonStartError, Message: start.Error}
		}
		s.setExit(c, x)
		return fmt.Errorf("start container %s (%s): %s", id, rec.Name, start.Error)
	}
	s.log.Info("container started", "container", id, "name", rec.Name, "pid", start.Pid, "monitorPid", start.MonitorPid)
	s.signalChange()
	return nil
}

// launch prepares the cgroup and spec and starts the monitor. It reports
// whether a monitor was started (after which its records are authoritative)
// and waits until the monitor reported back or exited.
func (s *Supervisor) launch(c *container, rec *Record) (bool, error) {
	dir := c.dir
	if rec.LogFile != "" {
		if err := os.MkdirAll(filepath.Dir(rec.LogFile), 0o755); err != nil {
			return false, fmt.Errorf("create log directory: %w", err)
		}
	}
	spec, err := s.createCgroup(rec)
	if err != nil {
		return false, err
	}
	spec.Args, spec.Env, spec.WorkingDir, spec.LogPath = rec.Args, rec.Env, rec.WorkingDir, rec.LogFile
	spec.Stdin, spec.StdinOnce, spec.Security = rec.Stdin, rec.StdinOnce, rec.Security
	spec.Pod, spec.MonitorCgroupDirs = rec.Pod, s.monDirs
	if rec.Rootfs != nil {
		spec.Rootfs = s.rootfsSpec(dir, rec.Rootfs)
	} else if len(rec.Mounts) > 0 {
		spec.Mounts = rec.Mounts
		s.logMountPoints(rec)
	}
	if rec.Resources != nil && rec.Resources.OOMScoreAdj != nil {
		spec.OOMScoreAdj = rec.Resources.OOMScoreAdj
		if *spec.OOMScoreAdj < 0 {
			s.oomAdjWarning.Do(func() {
				s.log.Warn("negative oom_score_adj needs CAP_SYS_RESOURCE; it may not be applied", "container", rec.ID, "oomScoreAdj", *spec.OOMScoreAdj)
			})
		}
	}
	if err := statefile.WriteVolatile(filepath.Join(dir, monitorproc.FileSpec), spec); err != nil {
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
		Path:        s.monitor,
		Args:        []string{monitorproc.MonitorArg0, shortID(rec.ID)},
		Env:         []string{monitorproc.MonitorEnv + "=" + dir},
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
	s.mu.Lock()
	c.child = true
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		s.mu.Lock()
		c.monitorDone = true
		s.mu.Unlock()
		s.kickWatcher()
	}()
	_ = started.SetReadDeadline(time.Now().Add(monitorStartTimeout))
	var b [1]byte
	if _, err := started.Read(b[:]); err != nil {
		return true, fmt.Errorf("waiting for the monitor: %w", err)
	}
	return true, nil
}

// logMountPoints tells which mount targets of a host-image container do
// not exist on the host: the container init creates them there as empty
// mount points (a directory, or a file for a file source), and they stay
// after the container. Existing targets are used as they are.
func (s *Supervisor) logMountPoints(rec *Record) {
	for _, m := range rec.Mounts {
		if _, err := os.Stat(m.Target); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		kind := "directory"
		if st, err := os.Stat(m.Source); err == nil && !st.IsDir() {
			kind = "file"
		}
		s.log.Debug("host-image container: mount target does not exist on the host; creating it as an empty mount point",
			"container", rec.ID, "name", rec.Name, "target", m.Target, "as", kind)
	}
}

// createCgroup makes the container's cgroup with its limits, and returns a
// monitor spec that places the container there.
func (s *Supervisor) createCgroup(rec *Record) (*monitorproc.Spec, error) {
	n, err := cgroupName(rec.CgroupPath)
	if err != nil {
		return nil, err
	}
	if err := s.cg.Create(n, nil); err != nil {
		return nil, err
	}
	if err := s.cg.Update(n, cgroupResources(rec.Resources)); err != nil {
		_ = s.removeCgroup(rec.CgroupPath)
		return nil, fmt.Errorf("field linux.resources: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	spec := &monitorproc.Spec{MemoryDir: s.cg.Dir("memory", n), CgroupV2: s.cg.Mode() == cgroups.ModeV2}
	for _, d := range s.cg.Dirs(n) {
		spec.CgroupDirs = append(spec.CgroupDirs, monitorproc.CgroupDir{Dir: d.Path, Root: d.Mount, Controller: d.Controller})
	}
	return spec, nil
}

// shortID is the first 12 characters of an id, for process titles.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
