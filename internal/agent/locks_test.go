package agent

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/errdefs"
)

// A second agent on a root dir a live agent holds is told which flag to
// change; once the first lets go, the root dir is free.
func TestSecondAgentOnOneRootDirIsRefused(t *testing.T) {
	cfg := &config.Config{RootDir: t.TempDir()}
	release, err := lockRootDir(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockRootDir(cfg)
	want := fmt.Sprintf("--root-dir %s is held by the minilet with root dir %s (pid %d); give this agent its own --root-dir", cfg.RootDir, cfg.RootDir, os.Getpid())
	if err == nil || err.Error() != want || !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second lock: %v\nwant: %s", err, want)
	}
	release()
	again, err := lockRootDir(cfg)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
}
