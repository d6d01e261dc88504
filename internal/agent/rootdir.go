package agent

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/errdefs"
)

// rootDirMode is --root-dir's mode: root only. The root dir holds the
// agent's private keys (pki/), pod volumes and secrets; a container whose
// user is not root, or a server that shares a host directory, must find
// nothing to read there.
const rootDirMode fs.FileMode = 0o700

// privateRootDir creates the root dir with rootDirMode, or tightens an
// existing one (an earlier version made it 0750). A shared directory
// (sticky bit, like /tmp) is refused rather than closed to its other users.
func privateRootDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, rootDirMode); err != nil {
		return fmt.Errorf("--%s %s: %w", config.FlagRootDir, dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--%s %s: %w", config.FlagRootDir, dir, err)
	}
	switch mode := fi.Mode(); {
	case !mode.IsDir():
		return errdefs.Classify(fmt.Errorf("--%s %s is not a directory", config.FlagRootDir, dir), errdefs.ErrInvalidArgument)
	case mode&fs.ModeSticky != 0:
		return errdefs.Classify(fmt.Errorf("--%s %s is a shared directory (sticky bit, like /tmp): give the agent a directory of its own, e.g. %s",
			config.FlagRootDir, dir, config.DefaultRootDir), errdefs.ErrInvalidArgument)
	case mode.Perm() != rootDirMode:
		if err := os.Chmod(dir, rootDirMode); err != nil {
			return fmt.Errorf("--%s %s: making it readable by root only: %w", config.FlagRootDir, dir, err)
		}
		log.Info("made the root dir readable by root only", "rootDir", dir, "was", mode.Perm().String())
	}
	return nil
}
