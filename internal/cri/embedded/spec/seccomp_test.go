package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func profile(t runtimeapi.SecurityProfile_ProfileType, ref string) *runtimeapi.LinuxContainerSecurityContext {
	return &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: t, LocalhostRef: ref}}
}

func TestSeccompFilter(t *testing.T) {
	caps, _ := containerCaps(nil)
	def, err := seccompFilter(profile(runtimeapi.SecurityProfile_RuntimeDefault, ""), *caps)
	if err != nil || len(def) == 0 || len(def)%8 != 0 {
		t.Fatalf("RuntimeDefault: %d bytes, %v", len(def), err)
	}
	t.Logf("RuntimeDefault: %d BPF instructions", len(def)/8)
	for name, sc := range map[string]*runtimeapi.LinuxContainerSecurityContext{
		"unset":      nil,
		"Unconfined": profile(runtimeapi.SecurityProfile_Unconfined, ""),
		"privileged": {Privileged: true, Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}},
	} {
		if got, err := seccompFilter(sc, *caps); err != nil || got != nil {
			t.Errorf("%s: %d bytes, %v; want no filter", name, len(got), err)
		}
	}
	dir := t.TempDir()
	local := filepath.Join(dir, "deny-mkdir.json")
	if err := os.WriteFile(local, []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat","no_such_call"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := seccompFilter(profile(runtimeapi.SecurityProfile_Localhost, local), *caps); err != nil || len(got) == 0 {
		t.Errorf("Localhost: %d bytes, %v", len(got), err)
	}
	_, err = seccompFilter(profile(runtimeapi.SecurityProfile_Localhost, filepath.Join(dir, "missing.json")), *caps)
	if err == nil || !strings.Contains(err.Error(), "securityContext.seccompProfile") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing Localhost profile: %v", err)
	}
	bad := filepath.Join(dir, "notify.json")
	_ = os.WriteFile(bad, []byte(`{"defaultAction":"SCMP_ACT_NOTIFY"}`), 0o600)
	if _, err := seccompFilter(profile(runtimeapi.SecurityProfile_Localhost, bad), *caps); !errdefs.IsInvalidArgument(err) {
		t.Errorf("unsupported action: %v", err)
	}
}
