package kuberuntime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSecurityContextMerge(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "audit.json"), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.SeccompProfileRoot = root })
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{
		RunAsUser: ptr[int64](1000), RunAsGroup: ptr[int64](2000), FSGroup: ptr[int64](3000), SupplementalGroups: []int64{4000},
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault},
	}
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{
		RunAsUser: ptr[int64](1500), AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
		Capabilities:   &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}},
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("audit.json")},
	}
	cfg, err := e.m.containerConfig(context.Background(), pod, &pod.Spec.Containers[0], 0, "")
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.GetLinux().GetSecurityContext()
	switch {
	case sc.GetRunAsUser().GetValue() != 1500, sc.GetRunAsGroup().GetValue() != 2000:
		t.Errorf("user %v group %v, want the container's 1500 and the pod's 2000", sc.GetRunAsUser(), sc.GetRunAsGroup())
	case !slices.Equal(sc.GetSupplementalGroups(), []int64{3000, 4000}):
		t.Errorf("supplemental groups %v, want fsGroup then the pod's [3000 4000]", sc.GetSupplementalGroups())
	case !sc.GetNoNewPrivs() || !sc.GetReadonlyRootfs() || sc.GetPrivileged():
		t.Errorf("noNewPrivs %v readonlyRootfs %v privileged %v", sc.GetNoNewPrivs(), sc.GetReadonlyRootfs(), sc.GetPrivileged())
	case sc.GetSeccomp().GetProfileType() != runtimeapi.SecurityProfile_Localhost || sc.GetSeccomp().GetLocalhostRef() != filepath.Join(root, "audit.json"):
		t.Errorf("seccomp %v, want the container's Localhost profile under the root", sc.GetSeccomp())
	case !slices.Equal(sc.GetCapabilities().GetAddCapabilities(), []string{"NET_ADMIN"}) || !slices.Equal(sc.GetCapabilities().GetDropCapabilities(), []string{"ALL"}):
		t.Errorf("capabilities %v", sc.GetCapabilities())
	case !slices.Contains(sc.GetMaskedPaths(), "/proc/kcore") || !slices.Contains(sc.GetReadonlyPaths(), "/proc/sys"):
		t.Errorf("masked %v readonly %v, want procMount Default's", sc.GetMaskedPaths(), sc.GetReadonlyPaths())
	}

	// Unset: Unconfined, or RuntimeDefault with seccompDefault; no
	// no_new_privs unless allowPrivilegeEscalation is explicitly false.
	plain := mkPod(v1.RestartPolicyAlways, nil, "a")
	plain.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AllowPrivilegeEscalation: ptr(true)}
	for _, seccompDefault := range []bool{false, true} {
		e := newEnv(t, func(c *Config) { c.SeccompDefault = seccompDefault })
		cfg, err := e.m.containerConfig(context.Background(), plain, &plain.Spec.Containers[0], 0, "")
		if err != nil {
			t.Fatal(err)
		}
		want := runtimeapi.SecurityProfile_Unconfined
		if seccompDefault {
			want = runtimeapi.SecurityProfile_RuntimeDefault
		}
		if sc := cfg.GetLinux().GetSecurityContext(); sc.GetSeccomp().GetProfileType() != want || sc.GetNoNewPrivs() {
			t.Errorf("seccompDefault %v: seccomp %v noNewPrivs %v", seccompDefault, sc.GetSeccomp(), sc.GetNoNewPrivs())
		}
	}
}

// Fields this node cannot honour stop the container with
// CreateContainerConfigError and an event naming the field.
func TestSecurityContextRefusals(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		name string
		edit func(*v1.Pod)
		want string
	}{
		{"runAsNonRoot on the host image", func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: ptr(true)}
		}, `container has runAsNonRoot and image will run as root (pod: "web_default(uid-1)", container: a)`},
		{"runAsNonRoot with uid 0", func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr[int64](0)}
		}, `container's runAsUser breaks non-root policy (pod: "web_default(uid-1)", container: a)`},
		{"runAsNonRoot with a named image user", func(p *v1.Pod) {
			p.Spec.Containers[0].Image = "example.com/app:v1"
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsNonRoot: ptr(true)}
		}, `container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root (pod: "web_default(uid-1)", container: a)`},
		{"missing Localhost seccomp profile", func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("nope.json")}}
		}, "field securityContext.seccompProfile.localhostProfile: cannot load seccomp profile"},
		{"Localhost profile outside the root", func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("../etc/x.json")}}
		}, "must be a path below the seccomp profile root"},
		{"unsafe sysctl", func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.msgmax", Value: "1"}}}
		}, `field spec.securityContext.sysctls[0]: forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{"net sysctl with host network", func(p *v1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}}}
		}, `sysctl "net.ipv4.tcp_syncookies" not allowed with host net enabled`},
		{"procMount Unmasked", func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{ProcMount: ptr(v1.UnmaskedProcMount)}
		}, "field securityContext.procMount"},
		{"user namespace", func(p *v1.Pod) { p.Spec.HostUsers = ptr(false) }, "field spec.hostUsers"},
		{"AppArmor without AppArmor", func(p *v1.Pod) {
			p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
		}, "field securityContext.appArmorProfile: AppArmor is not enabled on the host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "AppArmor") && appArmorEnabled() {
				t.Skip("AppArmor is enabled here")
			}
			e := newEnv(t, func(c *Config) { c.SeccompProfileRoot = root })
			e.images.SetFakeImages([]string{"example.com/app:v1"})
			for _, img := range e.images.Images {
				img.Username = "app"
			}
			pod := mkPod(v1.RestartPolicyAlways, nil, "a")
			tc.edit(pod)
			res := e.sync(pod)
			if w := res.Waiting["a"]; w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, tc.want) {
				t.Fatalf("waiting %+v, want CreateContainerConfigError with %q", w, tc.want)
			}
			if ev := e.rec.String(); !strings.Contains(ev, "Warning Failed Error: ") || !strings.Contains(ev, tc.want) {
				t.Errorf("no event naming it:\n%s", e.rec)
			}
			if len(e.rt.Containers) != 0 {
				t.Errorf("a container was created: %v", e.rt.Containers)
			}
		})
	}
}

func TestSandboxPrivilegedAndSysctls(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a", "b")
	pod.Spec.Containers[1].SecurityContext = &v1.SecurityContext{Privileged: ptr(true)}
	pod.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}, {Name: "net/ipv4/ip_local_port_range", Value: "1024 65000"}}}
	cfg := e.m.sandboxConfig(pod, 0)
	if !cfg.GetLinux().GetSecurityContext().GetPrivileged() {
		t.Error("a pod with a privileged container got an unprivileged sandbox")
	}
	want := map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.ip_local_port_range": "1024 65000"}
	if got := cfg.GetLinux().GetSysctls(); len(got) != 2 || got["kernel.shm_rmid_forced"] != "1" || got["net.ipv4.ip_local_port_range"] != want["net.ipv4.ip_local_port_range"] {
		t.Errorf("sysctls %v, want %v", got, want)
	}
	pod.Spec.SecurityContext.Sysctls = append(pod.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: "kernel.msgmax", Value: "1"})
	if got := e.m.sandboxConfig(pod, 0).GetLinux().GetSysctls(); len(got) != 0 {
		t.Errorf("a pod with a forbidden sysctl got sysctls %v in its sandbox", got)
	}
	e = newEnv(t, func(c *Config) { c.AllowedUnsafeSysctls = []string{"kernel.msg*"} })
	if got := e.m.sandboxConfig(pod, 0).GetLinux().GetSysctls(); got["kernel.msgmax"] != "1" {
		t.Errorf("allowedUnsafeSysctls kernel.msg* did not allow kernel.msgmax: %v", got)
	}
}

func TestAdmitSysctlsRefusesAsTheKubelet(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}}
	if ok, reason, msg := e.m.AdmitSysctls(pod); !ok {
		t.Fatalf("a safe sysctl refused: %s: %s", reason, msg)
	}
	pod.Spec.SecurityContext.Sysctls = append(pod.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: "kernel.msgmax", Value: "10000000000"})
	ok, reason, msg := e.m.AdmitSysctls(pod)
	if ok || reason != ReasonSysctlForbidden || !strings.Contains(msg, `spec.securityContext.sysctls[1]: forbidden sysctl: "kernel.msgmax" not allowlisted`) {
		t.Fatalf("admit = %v, %q, %q; want refused with SysctlForbidden naming the field", ok, reason, msg)
	}
	e = newEnv(t, func(c *Config) { c.AllowedUnsafeSysctls = []string{"kernel.msg*"} })
	if ok, reason, msg := e.m.AdmitSysctls(pod); !ok {
		t.Fatalf("allowedUnsafeSysctls kernel.msg* did not admit kernel.msgmax: %s: %s", reason, msg)
	}
}
