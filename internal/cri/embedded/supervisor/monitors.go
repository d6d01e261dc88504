package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

// MonitorCgroupName is the monitors' cgroup below the agent's cgroup root
// (Config.MonitorCgroup): one of their own, outside the agent's cgroup, so
// that a service manager ending the agent's cgroup leaves them and their
// containers running, and inside the cgroup root, so that two agents on a
// host never share it and `minilet cleanup` finds it. Their memory is not
// charged to any pod.
const MonitorCgroupName = "minilet-monitors"

// extraHierarchies are v1 hierarchies the driver does not manage but a
// service manager tracks processes by (systemd's own, and the unified one of
// a hybrid setup): monitors leave the agent's cgroup there too.
var extraHierarchies = []struct{ dir, controller string }{{"systemd", "name=systemd"}, {"unified", ""}}

// monitorCgroupDirs creates the monitors' cgroup and returns its
// directories; nil (monitors stay where the agent is) when it cannot be
// made.
func (s *Supervisor) monitorCgroupDirs(n cgroups.Name) []monitorproc.CgroupDir {
	if len(n) == 0 {
		return nil
	}
	if err := s.cg.Create(n, nil); err != nil {
		s.log.Warn("cannot create the monitors' cgroup; monitors stay in the agent's cgroup", "cgroup", s.cg.Path(n), "err", err)
		return nil
	}
	var out []monitorproc.CgroupDir
	mounts := map[string]bool{}
	for _, d := range s.cg.Dirs(n) {
		out = append(out, monitorproc.CgroupDir{Dir: d.Path, Root: d.Mount, Controller: d.Controller})
		mounts[d.Mount] = true
	}
	if s.cg.Mode() == cgroups.ModeV2 || len(out) == 0 {
		return out
	}
	root := filepath.Dir(out[0].Root)
	for _, h := range extraHierarchies {
		mount := filepath.Join(root, h.dir)
		if mounts[mount] || !fileExists(filepath.Join(mount, "cgroup.procs")) {
			continue
		}
		dir := filepath.Join(mount, s.cg.Path(n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			s.log.Warn("cannot create the monitors' cgroup", "dir", dir, "err", err)
			continue
		}
		out = append(out, monitorproc.CgroupDir{Dir: dir, Root: mount, Controller: h.controller})
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// liveMonitor is a monitor process found running, and the container
// process it started.
type liveMonitor struct {
	monitor, container monitorproc.ProcID
}

// findMonitors lists the monitor processes running for containers under
// the supervisor's directory, by state directory. It reads /proc: it is
// how containers whose records were lost are found again.
func (s *Supervisor) findMonitors() map[string]liveMonitor {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := map[string]liveMonitor{}
	children := map[int][]int{}
	prefix := []byte(monitorproc.MonitorEnv + "=")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		children[monitorproc.ProcParent(pid)] = append(children[monitorproc.ProcParent(pid)], pid)
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.HasPrefix(cmdline, []byte(monitorproc.MonitorArg0+"\x00")) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, prefix); ok {
				dir := string(v)
				if filepath.Dir(dir) == s.dir && !strings.Contains(filepath.Base(dir), "..") {
					out[dir] = liveMonitor{monitor: monitorproc.Identify(pid)}
				}
			}
		}
	}
	for dir, m := range out {
		// The monitor's one child is the container (a monitor forks nothing
		// else once the container runs).
		if kids := children[m.monitor.Pid]; len(kids) == 1 {
			m.container = monitorproc.Identify(kids[0])
			out[dir] = m
		}
	}
	return out
}

// JoinMonitorCgroup moves process pid (a helper of the runtime that must
// outlive the agent, as a pod's pause) into the monitors' cgroup, out of
// the agent's. Without a monitors' cgroup it is a no-op.
func (s *Supervisor) JoinMonitorCgroup(pid int) error {
	for _, d := range s.monDirs {
		if err := cgroups.JoinDir(d.Dir, pid); err != nil {
			return err
		}
	}
	return nil
}
