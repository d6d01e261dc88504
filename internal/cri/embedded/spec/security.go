package spec

import (
	"fmt"
	"os"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Default masked and read-only paths (procMount Default), as runc's and
// the kubelet's: what a container gets when the CRI config does not say.
var (
	defaultMaskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// security resolves how a container is confined from its CRI security
// context and its pod's sysctls, the same for every image. user is who it
// runs as (already combined with the image's User). A field this runtime
// cannot enforce is an error naming it: the container never runs less
// confined than asked.
func security(sc *runtimeapi.LinuxContainerSecurityContext, user monitorproc.UserSpec, sandbox *runtimeapi.PodSandboxConfig) (*monitorproc.Security, error) {
	if err := unsupported(sc, sandbox); err != nil {
		return nil, err
	}
	caps, err := containerCaps(sc)
	if err != nil {
		return nil, err
	}
	sec := &monitorproc.Security{
		User: user, Privileged: sc.GetPrivileged(), NoNewPrivs: sc.GetNoNewPrivs(),
		ReadOnlyRoot: sc.GetReadonlyRootfs(),
	}
	if caps != nil {
		sec.Caps = *caps
		if sec.Seccomp, err = seccompFilter(sc, *caps); err != nil {
			return nil, err
		}
		// nil: the default; an empty list (procMount Unmasked): none.
		sec.MaskedPaths, sec.ReadonlyPaths = defaultMaskedPaths, defaultReadonlyPaths
		if sc.GetMaskedPaths() != nil {
			sec.MaskedPaths = sc.GetMaskedPaths()
		}
		if sc.GetReadonlyPaths() != nil {
			sec.ReadonlyPaths = sc.GetReadonlyPaths()
		}
	}
	if sysctls := sandbox.GetLinux().GetSysctls(); len(sysctls) > 0 {
		sec.Sysctls = sysctls
		sec.HostNamespaces = hostNamespaces()
	}
	return sec, nil
}

// unsupported names the first field asking for a confinement this runtime
// has no means to apply.
func unsupported(sc *runtimeapi.LinuxContainerSecurityContext, sandbox *runtimeapi.PodSandboxConfig) error {
	fail := func(field, why string) error {
		return fmt.Errorf("field %s: %s: %w", field, why, errdefs.ErrInvalidArgument)
	}
	if p := sc.GetApparmor(); p != nil && p.GetProfileType() != runtimeapi.SecurityProfile_Unconfined {
		return fail("securityContext.appArmorProfile", "AppArmor profiles are not supported by the embedded runtime")
	}
	if p := sc.GetApparmorProfile(); p != "" && p != "unconfined" { //nolint:staticcheck // older CRI clients still send it; it must not be ignored silently
		return fail("securityContext.appArmorProfile", "AppArmor profiles are not supported by the embedded runtime")
	}
	// On a host without SELinux a label means nothing and runc and
	// containerd ignore it (the upstream specs set one on many pods); on a
	// host enforcing SELinux, running unlabelled would weaken the pod.
	if o := sc.GetSelinuxOptions(); (o.GetUser() != "" || o.GetRole() != "" || o.GetType() != "" || o.GetLevel() != "") && selinuxEnabled() {
		return fail("securityContext.seLinuxOptions", "SELinux labels are not supported by the embedded runtime, and this host has SELinux enabled")
	}
	for _, ns := range []*runtimeapi.NamespaceOption{sc.GetNamespaceOptions(), sandbox.GetLinux().GetSecurityContext().GetNamespaceOptions()} {
		if u := ns.GetUsernsOptions(); u != nil && u.GetMode() == runtimeapi.NamespaceMode_POD {
			return fail("hostUsers", "user namespaces are not supported by the embedded runtime")
		}
	}
	if sc.GetRunAsUsername() != "" && sc.GetRunAsUser() != nil {
		return fail("securityContext.runAsUser", "both a user name and a uid were given")
	}
	return nil
}

// selinuxEnabled tells whether the host has SELinux on: its filesystem
// is mounted (as runc's and containerd's SELinux library decide). A
// variable so tests can set it.
var selinuxEnabled = func() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err == nil
}

// hostNamespaces are the agent's own namespaces, by which the container
// init tells whether a sysctl would reach the host.
func hostNamespaces() map[string]uint64 {
	out := map[string]uint64{}
	for _, ns := range []string{"net", "ipc", "uts"} {
		var st unix.Stat_t
		if err := unix.Stat("/proc/self/ns/"+ns, &st); err == nil {
			out[ns] = st.Ino
		}
	}
	return out
}
