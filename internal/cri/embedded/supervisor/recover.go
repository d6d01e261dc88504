package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

// A container must never run twice. Its monitor and its state files are
// how the agent knows it runs; when one of them is lost (a monitor killed,
// a record deleted or corrupt) the container itself may well still run, and
// reporting it exited would make the kubelet start a second copy beside it.
// So before a container is believed dead, its process is looked for, by
// identity (PID, start time, boot ID; a pidfd for signals) and in its own
// cgroup, which holds nothing else. What is found is re-adopted when its
// monitor still runs, else killed; then the exit is recorded with a message
// naming what was lost and what was done (the kubelet shows it as the
// container's last state), and a warning is logged. Each such exit, and
// each re-adoption, carries the reason ReasonStateLost, which the kubelet
// side records as a Warning event.

// stateLostTimeout bounds the wait for a killed container's processes to
// be gone.
const stateLostTimeout = 10 * time.Second

// containerRunning reports whether the process a start record names still
// runs as that container: by its identity, or (records of older versions,
// without a start time) by its membership of the container's cgroup.
func (s *Supervisor) containerRunning(rec *Record, st *monitorproc.StartRecord) bool {
	p := st.Container()
	if !p.Alive() {
		return false
	}
	if p.Ticks != 0 {
		return true
	}
	return slices.Contains(s.cgroupPids(rec), p.Pid)
}

// cgroupPids are the processes in the container's cgroup.
func (s *Supervisor) cgroupPids(rec *Record) []int {
	n, err := cgroupName(rec.CgroupPath)
	if err != nil || !s.cg.Exists(n) {
		return nil
	}
	ps, _ := s.cg.Pids(n)
	return ps
}

// killContainer kills what is left of a container whose monitor is gone:
// its main process (verified) and group, and everything in its cgroup. It
// reports whether anything was running, and waits (bounded) until nothing
// is.
func (s *Supervisor) killContainer(rec *Record, ctr monitorproc.ProcID) bool {
	running := false
	if ctr.Pid > 0 {
		if ok, err := ctr.SignalGroup(syscall.SIGKILL); ok {
			running = true
		} else if err != nil {
			s.log.Warn("cannot kill container process", "container", rec.ID, "pid", ctr.Pid, "err", err)
		}
	}
	n, err := cgroupName(rec.CgroupPath)
	if err != nil {
		return running
	}
	deadline := time.Now().Add(stateLostTimeout)
	for {
		ps := s.cgroupPids(rec)
		if len(ps) == 0 && !ctr.Alive() {
			return running
		}
		running = true
		if time.Now().After(deadline) {
			s.log.Warn("container processes outlived SIGKILL", "container", rec.ID, "pids", ps)
			return running
		}
		_ = s.cg.Kill(n)
		time.Sleep(10 * time.Millisecond) // bounded by deadline; the kernel tears processes down
	}
}

// monitorLost decides the exit of a running container whose monitor ended
// without recording one.
func (s *Supervisor) monitorLost(c *container) *monitorproc.ExitRecord {
	st := c.start
	now := time.Now().UnixNano()
	if st.BootID != "" && st.BootID != monitorproc.BootID() {
		msg := "the machine restarted while the container ran; its exit status is unknown"
		s.log.Warn("container state lost", "container", c.rec.ID, "name", c.rec.Name, "lost", "monitor (reboot)", "action", "recorded the exit")
		return &monitorproc.ExitRecord{ExitCode: 255, FinishedAt: now, Reason: monitorproc.ReasonStateLost, Message: msg}
	}
	var ctr monitorproc.ProcID
	if s.containerRunning(&c.rec, st) {
		ctr = st.Container()
	}
	if s.killContainer(&c.rec, ctr) {
		msg := fmt.Sprintf("the container's monitor (pid %d) was lost while the container (pid %d) still ran; without its monitor the container's output and exit status cannot be recorded, so it was killed (its identity checked by start time) rather than left running beside a new copy",
			st.MonitorPid, st.Pid)
		s.log.Warn("container state lost", "container", c.rec.ID, "name", c.rec.Name, "lost", "monitor", "monitorPid", st.MonitorPid,
			"pid", st.Pid, "action", "killed the container")
		return &monitorproc.ExitRecord{ExitCode: 137, FinishedAt: now, Reason: monitorproc.ReasonStateLost, Message: msg}
	}
	msg := fmt.Sprintf("the container's monitor (pid %d) ended without recording the container's exit status (its exit record is missing or unreadable); the container (pid %d) no longer runs, its exit code is unknown",
		st.MonitorPid, st.Pid)
	s.log.Warn("container state lost", "container", c.rec.ID, "name", c.rec.Name, "lost", "monitor or exit record", "monitorPid", st.MonitorPid,
		"action", "recorded the exit as unknown")
	return &monitorproc.ExitRecord{ExitCode: 255, FinishedAt: now, Reason: monitorproc.ReasonStateLost, Message: msg}
}

// recoverLost runs once at Open, after load: containers whose start record
// is lost are re-adopted (their monitor still runs) or killed, and monitors
// running for containers whose own record is lost are ended with their
// container.
func (s *Supervisor) recoverLost() {
	var lostStart []*container
	known := map[string]bool{}
	for _, c := range s.containers {
		known[c.dir] = true
		if c.start == nil && c.exit == nil && fileExists(filepath.Join(c.dir, monitorproc.FileSpec)) {
			lostStart = append(lostStart, c)
		}
	}
	found := s.findMonitors()
	for _, c := range lostStart {
		s.recoverStart(c, found[c.dir])
	}
	for dir, m := range found {
		if known[dir] {
			continue
		}
		// A monitor whose container record is gone: no record says what
		// the container is, so it cannot be reported and would be started
		// again beside itself. End it; its monitor then records the exit
		// and ends too.
		var spec monitorproc.Spec
		_ = statefile.Read(filepath.Join(dir, monitorproc.FileSpec), &spec)
		if m.container.Pid > 0 {
			_, _ = m.container.SignalGroup(syscall.SIGKILL)
		}
		for _, h := range spec.CgroupDirs {
			_ = killCgroupDir(h.Dir)
		}
		s.log.Warn("container state lost", "dir", dir, "lost", "container record", "monitorPid", m.monitor.Pid, "pid", m.container.Pid,
			"action", "killed the container so that it does not run twice")
	}
}

// recoverStart handles a container that was launched (its monitor spec
// exists) but whose start record is missing or corrupt.
func (s *Supervisor) recoverStart(c *container, m liveMonitor) {
	if m.monitor.Pid > 0 && m.container.Pid > 0 {
		// Its monitor still runs: re-adopt it, the start record rebuilt
		// from the processes themselves.
		st := &monitorproc.StartRecord{MonitorPid: m.monitor.Pid, MonitorTicks: m.monitor.Ticks, Pid: m.container.Pid,
			Ticks: m.container.Ticks, BootID: m.container.BootID, StartedAt: procStartedAt(m.container.Ticks)}
		if err := statefile.Write(filepath.Join(c.dir, monitorproc.FileStart), st); err != nil {
			s.log.Warn("cannot rewrite the start record", "container", c.rec.ID, "err", err)
		}
		c.start = st
		c.stateLost = fmt.Sprintf("the container's start record was lost while its monitor (pid %d) still ran; the running container (pid %d) was re-adopted and its start record rebuilt",
			m.monitor.Pid, m.container.Pid)
		s.log.Warn("container state lost", "container", c.rec.ID, "name", c.rec.Name, "lost", "start record", "pid", st.Pid,
			"action", "re-adopted the running container")
		return
	}
	if m.monitor.Pid > 0 {
		_, _ = m.monitor.Signal(syscall.SIGKILL)
	}
	killed := s.killContainer(&c.rec, m.container)
	now := time.Now().UnixNano()
	msg := "the container's start record was lost and no monitor runs for it; the container no longer runs, its exit code is unknown"
	code := int32(255)
	if killed {
		msg = "the container's start record was lost and its monitor is gone; what still ran of the container was killed rather than left running beside a new copy"
		code = 137
	}
	c.start = &monitorproc.StartRecord{StartedAt: now}
	c.exit = &monitorproc.ExitRecord{ExitCode: code, FinishedAt: now, Reason: monitorproc.ReasonStateLost, Message: msg}
	_ = statefile.Write(filepath.Join(c.dir, monitorproc.FileStart), c.start)
	if err := statefile.Write(filepath.Join(c.dir, monitorproc.FileExit), c.exit); err != nil {
		s.log.Warn("cannot record container exit", "container", c.rec.ID, "err", err)
	}
	close(c.exited)
	s.log.Warn("container state lost", "container", c.rec.ID, "name", c.rec.Name, "lost", "start record", "killed", killed,
		"action", "recorded the exit")
}

// killCgroupDir kills what runs in one cgroup directory of a container.
func killCgroupDir(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	return cgroups.KillDir(dir)
}

// procStartedAt turns a process start time (clock ticks since boot) into
// Unix nanoseconds.
func procStartedAt(ticks uint64) int64 {
	var info syscall.Sysinfo_t
	if ticks == 0 || syscall.Sysinfo(&info) != nil {
		return time.Now().UnixNano()
	}
	const hz = 100 // USER_HZ, fixed at 100 on Linux for /proc
	boot := time.Now().Add(-time.Duration(info.Uptime) * time.Second)
	return boot.Add(time.Duration(ticks) * time.Second / hz).UnixNano()
}
