package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/minilet/minilet/test/harness"
)

// imageScript builds (or finds cached) the VM image and prints its directory
// as the last line.
const imageScript = "scripts/vm-image.sh"

// image is what scripts/vm-image.sh made: a kernel, an initrd, a root disk
// image and the kernel command line to boot them with.
type image struct {
	kernel, initrd, rootfs string
	cmdline                string
}

var cached struct {
	once sync.Once
	img  image
	err  error
}

// getImage returns the VM image, building it on the first call of this
// process: about a minute on a machine that has never built it, no time
// once cached (scripts/vm-image.sh keys the cache on its own content). The
// script's progress goes to t's log, so a cold build says so.
func getImage(t testing.TB) (image, error) {
	cached.once.Do(func() { cached.img, cached.err = buildImage(t) })
	return cached.img, cached.err
}

func buildImage(t testing.TB) (image, error) {
	dir, err := harness.RunScript(t, imageScript)
	if err != nil {
		return image{}, fmt.Errorf("VM image: %w", err)
	}
	img := image{
		kernel: filepath.Join(dir, "vmlinuz"),
		initrd: filepath.Join(dir, "initrd.img"),
		rootfs: filepath.Join(dir, "rootfs.img"),
	}
	for _, f := range []string{img.kernel, img.initrd, img.rootfs} {
		if _, err := os.Stat(f); err != nil {
			return image{}, fmt.Errorf("VM image: %s printed %q, which is incomplete: %w", imageScript, dir, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return image{}, fmt.Errorf("VM image: reading the kernel command line: %w", err)
	}
	img.cmdline = strings.TrimSpace(string(b))
	return img, nil
}
