package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The container's security context as the kubelet sends it over the CRI:
// pod-level settings merged under container-level ones, the image's user
// checked against runAsNonRoot, the seccomp profile resolved (Localhost
// under the profile root, unset → Unconfined or, with seccompDefault,
// RuntimeDefault), procMount turned into masked and read-only paths.
// Whatever this node cannot enforce stops the container with
// CreateContainerConfigError and an error naming the field.

// The masked and read-only paths of procMount Default, as the kubelet sends
// them.
var (
	defaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
		"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// safeSysctls are the sysctls the kubelet allows without
// allowedUnsafeSysctls: namespaced, and unable to hurt other pods.
var safeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_rmem",
	"net.ipv4.tcp_wmem",
}

// effectiveSecurityContext is the container's security context with the
// pod's filling what the container leaves unset, as the kubelet merges
// them (fsGroup, supplementalGroups and sysctls stay pod-only).
func effectiveSecurityContext(pod *v1.Pod, c *v1.Container) *v1.SecurityContext {
	sc := &v1.SecurityContext{}
	if c.SecurityContext != nil {
		sc = c.SecurityContext.DeepCopy()
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return sc
	}
	if sc.SELinuxOptions == nil {
		sc.SELinuxOptions = psc.SELinuxOptions
	}
	if sc.RunAsUser == nil {
		sc.RunAsUser = psc.RunAsUser
	}
	if sc.RunAsGroup == nil {
		sc.RunAsGroup = psc.RunAsGroup
	}
	if sc.RunAsNonRoot == nil {
		sc.RunAsNonRoot = psc.RunAsNonRoot
	}
	if sc.SeccompProfile == nil {
		sc.SeccompProfile = psc.SeccompProfile
	}
	if sc.AppArmorProfile == nil {
		sc.AppArmorProfile = psc.AppArmorProfile
	}
	return sc
}

// securityContext is the CRI security context of c, or an error (for
// CreateContainerConfigError) naming the field this node cannot honour.
func (m *Manager) securityContext(ctx context.Context, pod *v1.Pod, c *v1.Container) (*runtimeapi.LinuxContainerSecurityContext, error) {
	eff := effectiveSecurityContext(pod, c)
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		return nil, errors.New("field spec.hostUsers: user namespaces (hostUsers: false) are not supported on this node")
	}
	sc := &runtimeapi.LinuxContainerSecurityContext{
		Privileged:     eff.Privileged != nil && *eff.Privileged,
		ReadonlyRootfs: eff.ReadOnlyRootFilesystem != nil && *eff.ReadOnlyRootFilesystem,
		// As the kubelet: only an explicit allowPrivilegeEscalation: false.
		NoNewPrivs: eff.AllowPrivilegeEscalation != nil && !*eff.AllowPrivilegeEscalation,
	}
	if eff.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *eff.RunAsUser}
	}
	if eff.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *eff.RunAsGroup}
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.FSGroup != nil {
			sc.SupplementalGroups = append(sc.SupplementalGroups, *psc.FSGroup)
		}
		sc.SupplementalGroups = append(sc.SupplementalGroups, psc.SupplementalGroups...)
	}
	if caps := eff.Capabilities; caps != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, c := range caps.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(c))
		}
		for _, c := range caps.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(c))
		}
	}
	if o := eff.SELinuxOptions; o != nil {
		sc.SelinuxOptions = &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
	}
	sc.MaskedPaths, sc.ReadonlyPaths = defaultMaskedPaths, defaultReadonlyPaths
	if eff.ProcMount != nil && *eff.ProcMount == v1.UnmaskedProcMount {
		// Only with a user namespace, which was refused above.
		return nil, errors.New("field securityContext.procMount: Unmasked needs hostUsers: false, which this node does not support")
	}
	var err error
	if sc.Seccomp, err = m.seccompProfile(eff); err != nil {
		return nil, err
	}
	if sc.Apparmor, err = appArmorProfile(pod, c, eff); err != nil {
		return nil, err
	}
	if err := m.setImageUser(ctx, c, sc); err != nil {
		return nil, err
	}
	if err := verifyRunAsNonRoot(pod, c, eff, sc); err != nil {
		return nil, err
	}
	return sc, nil
}

// seccompProfile resolves the profile as the kubelet does.
func (m *Manager) seccompProfile(eff *v1.SecurityContext) (*runtimeapi.SecurityProfile, error) {
	p := eff.SeccompProfile
	if p == nil {
		if m.cfg.SeccompDefault {
			return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case v1.SeccompProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case v1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, errors.New("field securityContext.seccompProfile.localhostProfile is required for type Localhost")
		}
		rel := filepath.Clean(*p.LocalhostProfile)
		if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("field securityContext.seccompProfile.localhostProfile %q must be a path below the seccomp profile root", *p.LocalhostProfile)
		}
		path := filepath.Join(m.cfg.SeccompProfileRoot, rel)
		if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("field securityContext.seccompProfile.localhostProfile: cannot load seccomp profile %q: no such regular file", path)
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: path}, nil
	}
	return nil, fmt.Errorf("field securityContext.seccompProfile.type: unknown type %q", p.Type)
}

// appArmorProfile resolves the AppArmor profile (field, or the older
// annotation); any profile other than Unconfined needs AppArmor in the
// kernel, or the container must not start.
func appArmorProfile(pod *v1.Pod, c *v1.Container, eff *v1.SecurityContext) (*runtimeapi.SecurityProfile, error) {
	var out *runtimeapi.SecurityProfile
	switch p := eff.AppArmorProfile; {
	case p != nil && p.Type == v1.AppArmorProfileTypeRuntimeDefault:
		out = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case p != nil && p.Type == v1.AppArmorProfileTypeLocalhost:
		ref := ""
		if p.LocalhostProfile != nil {
			ref = *p.LocalhostProfile
		}
		out = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}
	case p != nil:
		return nil, nil
	default:
		a := pod.Annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]
		switch {
		case a == v1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			out = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		case strings.HasPrefix(a, v1.DeprecatedAppArmorBetaProfileNamePrefix):
			out = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost,
				LocalhostRef: strings.TrimPrefix(a, v1.DeprecatedAppArmorBetaProfileNamePrefix)}
		default:
			return nil, nil
		}
	}
	if !appArmorEnabled() {
		return nil, errors.New("field securityContext.appArmorProfile: AppArmor is not enabled on the host, so the profile cannot be enforced")
	}
	return out, nil
}

// appArmorEnabled reports whether the kernel enforces AppArmor.
var appArmorEnabled = func() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.HasPrefix(string(b), "Y")
}

// setImageUser gives the CRI the image's user when the security context
// names none, as the kubelet does (uid, or a user name).
func (m *Manager) setImageUser(ctx context.Context, c *v1.Container, sc *runtimeapi.LinuxContainerSecurityContext) error {
	if sc.RunAsUser != nil || isHostImage(c.Image) {
		return nil
	}
	resp, err := m.cfg.Images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image}, false)
	if err != nil {
		return fmt.Errorf("inspect image %q for its user: %w", c.Image, err)
	}
	img := resp.GetImage()
	switch {
	case img.GetUid() != nil:
		sc.RunAsUser = &runtimeapi.Int64Value{Value: img.GetUid().GetValue()}
	case img.GetUsername() != "":
		sc.RunAsUsername = img.GetUsername()
	}
	return nil
}

// verifyRunAsNonRoot refuses a container that would run as root while
// runAsNonRoot is set, in the kubelet's words. The host image runs as root
// unless runAsUser says otherwise.
func verifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, eff *v1.SecurityContext, sc *runtimeapi.LinuxContainerSecurityContext) error {
	if eff.RunAsNonRoot == nil || !*eff.RunAsNonRoot {
		return nil
	}
	if eff.RunAsUser != nil {
		if *eff.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podDesc(pod), c.Name)
		}
		return nil
	}
	switch {
	case sc.RunAsUser != nil && sc.RunAsUser.GetValue() == 0, sc.RunAsUser == nil && sc.RunAsUsername == "":
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podDesc(pod), c.Name)
	case sc.RunAsUser == nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", sc.RunAsUsername, podDesc(pod), c.Name)
	}
	return nil
}

// ReasonSysctlForbidden is the kubelet's reason for a pod refused at
// admission for a sysctl this node does not allow.
const ReasonSysctlForbidden = "SysctlForbidden"

// AdmitSysctls refuses, at admission as the kubelet does, a pod with a
// sysctl this node must not set for it (see podSysctls): the pod fails
// with reason SysctlForbidden instead of waiting in ContainerCreating.
func (m *Manager) AdmitSysctls(pod *v1.Pod) (ok bool, reason, message string) {
	if _, err := m.podSysctls(pod); err != nil {
		return false, ReasonSysctlForbidden, err.Error()
	}
	return true, "", ""
}

// podSysctls are the pod's sysctls for its sandbox, or an error naming the
// one this node must refuse: not in the safe set nor allowedUnsafeSysctls,
// or in a namespace the pod shares with the host.
func (m *Manager) podSysctls(pod *v1.Pod) (map[string]string, error) {
	psc := pod.Spec.SecurityContext
	if psc == nil || len(psc.Sysctls) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for i, s := range psc.Sysctls {
		name := s.Name
		if strings.Contains(name, "/") { // the slash form: net/ipv4/... → net.ipv4....
			name = strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(name, ".", "\x00"), "/", "."), "\x00", "/")
		}
		field := fmt.Sprintf("spec.securityContext.sysctls[%d]", i)
		if !slices.Contains(safeSysctls, name) && !unsafeAllowed(name, m.cfg.AllowedUnsafeSysctls) {
			return nil, fmt.Errorf("field %s: forbidden sysctl: %q not allowlisted (see allowedUnsafeSysctls)", field, s.Name)
		}
		switch {
		case strings.HasPrefix(name, "net.") && pod.Spec.HostNetwork:
			return nil, fmt.Errorf("field %s: sysctl %q not allowed with host net enabled", field, s.Name)
		case ipcSysctl(name) && pod.Spec.HostIPC:
			return nil, fmt.Errorf("field %s: sysctl %q not allowed with host ipc enabled", field, s.Name)
		case !strings.HasPrefix(name, "net.") && !ipcSysctl(name):
			return nil, fmt.Errorf("field %s: sysctl %q is not namespaced", field, s.Name)
		}
		out[name] = s.Value
	}
	return out, nil
}

func ipcSysctl(name string) bool {
	return strings.HasPrefix(name, "kernel.shm") || strings.HasPrefix(name, "kernel.msg") || name == "kernel.sem" ||
		strings.HasPrefix(name, "fs.mqueue.")
}

// unsafeAllowed matches name against allowedUnsafeSysctls entries (exact,
// or a prefix ending in "*").
func unsafeAllowed(name string, allowed []string) bool {
	for _, a := range allowed {
		if a == name || (strings.HasSuffix(a, "*") && strings.HasPrefix(name, strings.TrimSuffix(a, "*"))) {
			return true
		}
	}
	return false
}

// hasPrivilegedContainer reports whether any container of the pod is
// privileged; its sandbox must be too.
func hasPrivilegedContainer(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
			return true
		}
	}
	return false
}
