package spec

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// An SELinux label is ignored on a host without SELinux, as runc and
// containerd do, and refused, naming the field, on a host with it.
func TestSELinuxLabelIgnoredUnlessTheHostHasSELinux(t *testing.T) {
	sc := &runtimeapi.LinuxContainerSecurityContext{
		SelinuxOptions: &runtimeapi.SELinuxOption{Level: "s0:c0,c1"},
	}
	sandbox := &runtimeapi.PodSandboxConfig{}
	for _, enabled := range []bool{false, true} {
		was := selinuxEnabled
		selinuxEnabled = func() bool { return enabled }
		err := unsupported(sc, sandbox)
		selinuxEnabled = was
		switch {
		case !enabled && err != nil:
			t.Errorf("host without SELinux: %v, want the label ignored", err)
		case enabled && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "securityContext.seLinuxOptions")):
			t.Errorf("host with SELinux: %v, want an invalid-argument error naming securityContext.seLinuxOptions", err)
		}
	}
}
