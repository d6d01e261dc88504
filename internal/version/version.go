// Package version says which build of minilet this is and which
// Kubernetes release it implements, from what the Go toolchain stamped
// into the binary: the module version and VCS revision of the build, and
// the version of the k8s.io/kubelet module it was built against.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Override replaces the build's own version when set at link time:
// -ldflags "-X github.com/minilet/minilet/internal/version.Override=v0.3.0".
var Override = ""

// fallbackKubernetes is used only when the binary carries no module
// information (built outside module mode).
const fallbackKubernetes = "v1.37.2"

// Info is one build's identity.
type Info struct {
	// Minilet is the build's version: Override, else the module version
	// the go command derived from the VCS (a tag, or a pseudo-version such
	// as v0.0.0-20261128034436-b28e34b2e1c2, "+dirty" when the tree had
	// changes), else "dev".
	Minilet string
	// Revision is the VCS commit (12 characters), "" when unknown.
	Revision string
	// Modified says the work tree had uncommitted changes.
	Modified bool
	// Kubernetes is the release whose kubelet minilet follows, e.g.
	// v1.37.2 (the k8s.io/kubelet module v0.37.2).
	Kubernetes string
	Go         string
	Platform   string
}

// Get reads the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Minilet: "dev", Kubernetes: fallbackKubernetes, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Minilet = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
				if len(in.Revision) > 12 {
					in.Revision = in.Revision[:12]
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/kubelet" {
				if k, ok := kubernetesOf(d.Version); ok {
					in.Kubernetes = k
				}
			}
		}
	}
	if Override != "" {
		in.Minilet = Override
	}
	return in
}

// kubernetesOf maps a staging module's version (v0.37.2) to the
// Kubernetes release it was cut from (v1.37.2).
func kubernetesOf(module string) (string, bool) {
	rest, ok := strings.CutPrefix(module, "v0.")
	if !ok || rest == "" {
		return "", false
	}
	return "v1." + rest, true
}

// Kubelet is the kubelet version minilet reports in its node status: the
// Kubernetes release it implements, marked as minilet's.
func Kubelet() string { return Get().Kubernetes + "-minilet" }

// String is what `minilet version` prints.
func (in Info) String() string {
	build := in.Minilet
	if in.Revision != "" && !strings.Contains(build, in.Revision) {
		build += " (" + in.Revision
		if in.Modified {
			build += ", modified"
		}
		build += ")"
	}
	return fmt.Sprintf("minilet %s, Kubernetes %s, %s %s", build, in.Kubernetes, in.Go, in.Platform)
}
