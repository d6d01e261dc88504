package e2e

import (
	"testing"

	"github.com/minilet/minilet/test/harness"
)

// podRuntime is one runtime a test runs its pods on: the
// embedded one with host-image containers, and containerd with busybox
// (when MINILET_CONTAINERD_ENDPOINT is set).
type podRuntime struct {
	name  string
	image string // the image and its pull policy, as container fields
	start func(t *testing.T) *harness.Agent
}

func podRuntimes() []podRuntime {
	return []podRuntime{
		{"embedded", "image: host", func(t *testing.T) *harness.Agent {
			requireRoot(t)
			a := harness.New(t)
			a.Start()
			return a
		}},
		{"containerd", "image: " + harness.BusyboxImage + ", imagePullPolicy: IfNotPresent", func(t *testing.T) *harness.Agent {
			return containerdAgent(t)
		}},
	}
}
