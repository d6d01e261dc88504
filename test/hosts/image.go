package hosts

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/minilet/minilet/test/harness"
)

// imageScript builds (or finds cached) the node root filesystem and prints
// its directory as the last line.
const imageScript = "scripts/hosts-image.sh"

var image struct {
	once sync.Once
	dir  string
	err  error
}

// Image returns the directory of the node image (the read-only lower layer
// of every node's overlay), building it on the first call of this process:
// about a minute on a machine that has never built it, no time once cached
// (scripts/hosts-image.sh keys the cache on its own content). The script's
// progress goes to t's log, so a cold build says so.
func Image(t testing.TB) (string, error) {
	image.once.Do(func() { image.dir, image.err = buildImage(t) })
	return image.dir, image.err
}

func buildImage(t testing.TB) (string, error) {
	dir, err := harness.RunScript(t, imageScript)
	if err != nil {
		return "", fmt.Errorf("node image: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lib/systemd/systemd")); err != nil {
		return "", fmt.Errorf("node image: %s printed %q, which holds no systemd: %w", imageScript, dir, err)
	}
	return dir, nil
}
