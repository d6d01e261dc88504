// Package podnettest gives tests the real CNI reference plugins: built by
// the repo's scripts/cni-plugins.sh (cached by version), once per test
// process.
package podnettest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	once   sync.Once
	binDir string
	err    error
)

// BinDir returns the directory holding the plugins, building them first if
// needed; it fails the test if they cannot be built.
func BinDir(tb testing.TB) string {
	tb.Helper()
	once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "..", "scripts", "cni-plugins.sh")
		out, e := exec.Command(script).Output()
		if e != nil {
			if ee, ok := e.(*exec.ExitError); ok {
				e = fmt.Errorf("%w: %s", e, ee.Stderr)
			}
			err = fmt.Errorf("build the CNI plugins with %s: %w", script, e)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		binDir = lines[len(lines)-1]
	})
	if err != nil {
		tb.Fatal(err)
	}
	return binDir
}
