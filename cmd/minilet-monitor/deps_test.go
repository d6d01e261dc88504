package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksOnlyStdlibAndXSys keeps the monitor small: besides the standard
// library it may link golang.org/x/sys and minilet's own packages, which
// then may not bring anything else either (go list -deps is transitive).
func TestLinksOnlyStdlibAndXSys(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "golang.org/x/sys/") && !strings.HasPrefix(p, "github.com/minilet/minilet/") {
			t.Errorf("cmd/minilet-monitor links %s; it may only use the standard library, golang.org/x/sys and minilet's stdlib-only packages", p)
		}
	}
}
