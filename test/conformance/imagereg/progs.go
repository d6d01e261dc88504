package imagereg

import (
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The sources of the two small programs the pause and nonewprivs images
// run. They are ordinary main packages of this module (so vet and lint
// see them) and are built from these copies into dir, with no module.
//
//go:embed progs/pause/main.go progs/nnp/main.go
var progSources embed.FS

// buildProg builds progs/NAME statically into dir/bin/NAME with the Go
// toolchain of this machine, reproducibly (no paths, no build id).
func buildProg(ctx context.Context, dir, name string) (string, error) {
	src, err := progSources.ReadFile("progs/" + name + "/main.go")
	if err != nil {
		return "", err
	}
	srcDir := filepath.Join(dir, "src", name)
	if err := os.MkdirAll(srcDir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(srcDir, "main.go"), src, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(srcDir, "go.mod"), []byte("module minilet.test/"+name+"\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "bin", name)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build the %s program: the go toolchain is not on PATH: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, ".")
	cmd.Dir = srcDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the %s program: %w: %s", name, err, b)
	}
	return out, nil
}
