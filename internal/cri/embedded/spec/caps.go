package spec

import (
	"fmt"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultCaps are the capabilities a container from an image keeps unless
// it is privileged or its security context adds or drops some: the set
// Docker and containerd give containers.
var defaultCaps = []string{
	"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
}

// capNumbers maps capability names (without "CAP_") to their numbers.
var capNumbers = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
	"SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
	"NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
	"SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
	"SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
	"SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
	"SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
	"BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}

// allCaps is every capability bit.
const allCaps = ^uint64(0)

// containerCaps is the capability bounding set of a container: nil (all)
// when privileged, else the default set with the security context's
// additions and drops ("ALL" allowed in both).
func containerCaps(sc *runtimeapi.LinuxContainerSecurityContext) (*uint64, error) {
	if sc.GetPrivileged() {
		return nil, nil
	}
	var mask uint64
	for _, c := range defaultCaps {
		mask |= 1 << capNumbers[c]
	}
	for _, c := range sc.GetCapabilities().GetAddCapabilities() {
		bits, err := capBits(c)
		if err != nil {
			return nil, fmt.Errorf("field securityContext.capabilities.add: %w", err)
		}
		mask |= bits
	}
	for _, c := range sc.GetCapabilities().GetDropCapabilities() {
		bits, err := capBits(c)
		if err != nil {
			return nil, fmt.Errorf("field securityContext.capabilities.drop: %w", err)
		}
		mask &^= bits
	}
	return &mask, nil
}

func capBits(name string) (uint64, error) {
	n := strings.TrimPrefix(strings.ToUpper(name), "CAP_")
	if n == "ALL" {
		return allCaps, nil
	}
	bit, ok := capNumbers[n]
	if !ok {
		return 0, fmt.Errorf("unknown capability %q", name)
	}
	return 1 << bit, nil
}
