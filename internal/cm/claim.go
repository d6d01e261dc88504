package cm

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/hostlock"
)

// DefaultLockDir holds one lock file per cgroup root in use on the host.
// It is under /run on purpose: like the cgroups it guards, it does not
// outlive a reboot.
const DefaultLockDir = "/run/minilet/cgroup-roots"

// claim takes --cgroup-root for the agent whose root dir is cfg.Owner, so
// that its orphan cleanup can never reach another agent's pods:
//   - a live agent holding it refuses this one (the lock dies with it);
//   - pod cgroups an agent with another root dir left there (stopped, its
//     pods still running) refuse this one too: they are not this agent's
//     orphans. If that root dir is gone, so is the agent, and its pods are
//     orphans like any other.
func (m *Manager) claim() error {
	if m.cfg.Owner == "" {
		return nil
	}
	path := LockFile(m.cfg.LockDir, m.driver.Path(m.root))
	lock, err := hostlock.TryLock(path)
	var held *hostlock.HeldError
	if errors.As(err, &held) {
		return fmt.Errorf("--cgroup-root %s is %w; give this agent its own --cgroup-root", m.cfg.CgroupRoot, held)
	}
	if err != nil {
		return fmt.Errorf("--cgroup-root %s: %w", m.cfg.CgroupRoot, err)
	}
	prev := lock.Previous.RootDir
	if prev != "" && filepath.Clean(prev) != filepath.Clean(m.cfg.Owner) {
		if _, err := os.Stat(prev); err == nil {
			pods, err := m.PodCgroups()
			if err != nil || len(pods) > 0 {
				lock.Release() // the record still names the agent the pods belong to
				return errdefs.Classify(fmt.Errorf("--cgroup-root %s holds the cgroups of %d pod(s) that the minilet with root dir %s left running "+
					"while it is stopped; they are not this agent's to clean up: start that agent again, or give this agent its own --cgroup-root%s",
					m.cfg.CgroupRoot, len(pods), prev, errSuffix(err)), errdefs.ErrConflict)
			}
		}
		m.log.Info("taking over the cgroup root from a minilet that is not running", "cgroupRoot", m.cfg.CgroupRoot, "previousRootDir", prev)
	}
	if err := lock.Record(hostlock.Self(m.cfg.Owner)); err != nil {
		lock.Release()
		return fmt.Errorf("--cgroup-root %s: %w", m.cfg.CgroupRoot, err)
	}
	m.mu.Lock()
	m.lock = lock
	m.mu.Unlock()
	return nil
}

// LockFile is the lock file in lockDir of the cgroup root at cgroupPath
// (as the driver names it, e.g. "/minilet"). Lock files are never
// removed while agents may run: a removed lock file could be held by one
// agent and re-created for another.
func LockFile(lockDir, cgroupPath string) string {
	return filepath.Join(lockDir, url.PathEscape(cgroupPath)+".lock")
}

// claimed reports whether this manager may clean up below the cgroup
// root: it holds it, or it runs without an owner (tests).
func (m *Manager) claimed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.Owner == "" || m.lock != nil
}

// Close releases --cgroup-root for the next agent; the cgroups and the
// pods in them stay. It is idempotent.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lock.Release()
	m.lock = nil
}

// errSuffix is ": err" for a message that ends with what also failed.
func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (listing them: " + err.Error() + ")"
}
