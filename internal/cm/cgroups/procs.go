package cgroups

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The helpers below work on a cgroup directory (a Dir's Path) rather than
// a Name: they serve a process that was handed its cgroup's directories,
// such as the container monitor.

// JoinDir moves process pid into the cgroup at dir.
func JoinDir(dir string, pid int) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// KillDir sends SIGKILL to every process in the cgroup at dir (not in its
// descendants), never to the caller or to pid 1.
func KillDir(dir string) error {
	ps, err := readPids(dir)
	if err != nil {
		return err
	}
	return killPids(ps)
}

// Self returns the calling process's cgroup, relative to the hierarchy's
// root, in the hierarchy of controller (v1), or in the unified hierarchy
// when controller is "" (v2).
func Self(controller string) (string, bool) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	// Lines are "id:controller,controller:path"; v2 is "0::path".
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2], true
		}
		for _, c := range strings.Split(parts[1], ",") {
			if controller != "" && c == controller {
				return parts[2], true
			}
		}
	}
	return "", false
}

// OOMCount is the evidence of OOM kills in the memory cgroup at dir: the
// kernel's oom_kill counter (v1 memory.oom_control, v2 memory.events)
// where it has one, else (old v1 kernels) the number of times the limit
// was hit, which together with a SIGKILL death means the same. -1 if
// unknown.
func OOMCount(dir string, v2 bool) int64 {
	if dir == "" {
		return -1
	}
	file := "memory.oom_control"
	if v2 {
		file = "memory.events"
	}
	if kv, err := readKV(dir, file); err == nil {
		if n, ok := kv["oom_kill"]; ok {
			return int64(n)
		}
	}
	if v2 {
		return -1
	}
	n, err := readUint(dir, "memory.failcnt")
	if err != nil {
		return -1
	}
	return int64(n)
}
