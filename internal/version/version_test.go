package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "minilet dev, Kubernetes " + fallbackKubernetes},
		{"pseudo-version from the VCS", &debug.BuildInfo{
			Main:     debug.Module{Version: "v0.0.0-20261128034436-b28e34b2e1c2"},
			Deps:     []*debug.Module{{Path: "k8s.io/kubelet", Version: "v0.37.2"}},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "b28e34b2e1c2aaaaaaaa"}},
		}, "minilet v0.0.0-20261128034436-b28e34b2e1c2, Kubernetes v1.37.2"},
		{"a test binary: revision and changes only", &debug.BuildInfo{
			Main:     debug.Module{Version: "(devel)"},
			Deps:     []*debug.Module{{Path: "k8s.io/kubelet", Version: "v0.38.0"}},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}},
		}, "minilet dev (0123456789ab, modified), Kubernetes v1.38.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuildInfo(tc.bi).String(); !strings.HasPrefix(got, tc.want+", go") {
				t.Errorf("got %q, want it to start with %q", got, tc.want)
			}
		})
	}
}

// A binary built from this repository says which commit it is and which
// Kubernetes release it implements, never just "dev".
func TestBuiltBinaryNamesItsBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: the go command stamps no VCS version without it")
	}
	if err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Run(); err != nil {
		t.Skip("not in a git checkout")
	}
	bin := filepath.Join(t.TempDir(), "minilet")
	build := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, "./cmd/minilet")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	head, _ := exec.Command("git", "-C", "../..", "rev-parse", "--short=12", "HEAD").Output()
	got := string(out)
	if !strings.Contains(got, strings.TrimSpace(string(head))) || !strings.Contains(got, "Kubernetes v1.") || strings.Contains(got, "minilet dev") {
		t.Errorf("minilet version = %q; want the build's pseudo-version with commit %s and the Kubernetes release", got, head)
	}
	_ = os.Remove(bin)
}
