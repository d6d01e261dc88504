package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/hostlock"
)

// RootLockName is the root dir's lock file: held by the agent running on
// it, for as long as it runs.
const RootLockName = "minilet.lock"

// lockRootDir makes the agent the only one on --root-dir: its pod state,
// runtime state and containers are nobody else's to adopt. The lock is
// dropped by release, or by the kernel when the agent dies.
func lockRootDir(cfg *config.Config) (release func(), err error) {
	l, err := hostlock.Acquire(filepath.Join(cfg.RootDir, RootLockName), hostlock.Self(cfg.RootDir))
	if err != nil {
		return nil, heldBy(config.FlagRootDir, cfg.RootDir, err)
	}
	return l.Release, nil
}

// heldBy words a lock another live agent holds as the flag to change.
func heldBy(flag, value string, err error) error {
	var held *hostlock.HeldError
	if errors.As(err, &held) {
		return fmt.Errorf("--%s %s is %w; give this agent its own --%s", flag, value, held, flag)
	}
	return fmt.Errorf("--%s %s: %w", flag, value, err)
}
