package hosts

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ownersDir records which process owns each network, by network id. All a
// network's things carry its id (namespaces mh-<id>[-<node>], cgroups
// minilet-hosts/<id>-<node>, directories minilet-hosts-<id>-<node>-*), so
// that a later run can remove what a killed test process left: a test
// binary that hits go test's -timeout panics without running t.Cleanup,
// and its nodes would run on forever.
const ownersDir = "/run/minilet-hosts"

var sweepOnce sync.Once

// sweepStale removes, once per process, the networks and nodes of test
// processes that died without cleaning up.
func sweepStale(logf func(string, ...any)) {
	sweepOnce.Do(func() {
		ids, _ := os.ReadDir(ownersDir)
		for _, e := range ids {
			owner, err := os.ReadFile(filepath.Join(ownersDir, e.Name(), "owner"))
			if err != nil || ownerAlive(strings.TrimSpace(string(owner))) {
				continue
			}
			logf("removing network %s and its nodes, left by dead process %s", e.Name(), strings.TrimSpace(string(owner)))
			if err := removeStale(e.Name()); err != nil {
				logf("removing network %s: %v", e.Name(), err)
			}
		}
	})
}

// recordOwner marks network id as this process's.
func recordOwner(id string) error {
	me, err := processID(os.Getpid())
	if err != nil {
		return err
	}
	dir := filepath.Join(ownersDir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("recording the network's owner: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, "owner"), []byte(me+"\n"), 0o644)
}

func forgetOwner(id string) error {
	if err := os.RemoveAll(filepath.Join(ownersDir, id)); err != nil {
		return fmt.Errorf("forgetting the network's owner: %w", err)
	}
	return nil
}

// processID names a process unambiguously: its PID and start time (PIDs
// are reused).
func processID(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", fmt.Errorf("process %d: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: count from the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("process %d: short stat line", pid)
	}
	return fmt.Sprintf("%d:%s", pid, f[19]), nil // field 22, starttime
}

func ownerAlive(owner string) bool {
	var pid int
	if _, err := fmt.Sscanf(owner, "%d:", &pid); err != nil {
		return false
	}
	now, err := processID(pid)
	return err == nil && now == owner
}

// removeStale removes everything of network id: the nodes' processes
// first (killing each container's PID 1 ends its PID namespace), then
// their mounts, directories, namespaces and cgroups.
func removeStale(id string) error {
	var cgs nodeCgroups
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dirs, _ := filepath.Glob(filepath.Join(h, cgroupParent, id+"-*"))
		cgs.dirs = append(cgs.dirs, dirs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = eventually(ctx, "the stale nodes' processes to end", func() (bool, string, error) {
		cgs.kill()
		pids := cgs.pids()
		return len(pids) == 0, fmt.Sprint(pids), nil
	})
	errs := []error{err}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "minilet-hosts-"+id+"-*"))
	for _, d := range dirs {
		errs = append(errs, unmountBelow(d), os.RemoveAll(d))
	}
	netns, _ := filepath.Glob(filepath.Join("/run/netns", "mh-"+id+"*"))
	for _, ns := range netns {
		errs = append(errs, ip("netns", "del", filepath.Base(ns)))
	}
	errs = append(errs, cgs.remove(), forgetOwner(id))
	return errors.Join(errs...)
}

// unmountBelow detaches every mount at or below dir.
func unmountBelow(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	defer func() { _ = f.Close() }()
	var mnts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 &&
			(fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			mnts = append(mnts, fields[4])
		}
	}
	var errs []error
	for i := len(mnts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mnts[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mnts[i], err))
		}
	}
	return errors.Join(errs...)
}
