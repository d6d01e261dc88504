package monitorproc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Security is how a container's process is confined, the same for a
// host-image container and a container from an image: who it runs as, its
// capabilities, no_new_privs, its seccomp filter, a read-only root, masked
// and read-only paths and the sysctls of its namespaces. The agent
// resolves it from the CRI config (package spec); the container init
// enforces it, and refuses to start the container when it cannot.
type Security struct {
	User UserSpec `json:"user"`
	// Privileged keeps every capability the agent has; Caps is then unused.
	Privileged bool `json:"privileged,omitempty"`
	// Caps is the bounding, permitted and effective set (bit n is
	// capability n). As under runc, a program the container runs keeps
	// them only when it runs as root: the kernel clears them at exec for
	// any other user (no ambient capabilities are given).
	Caps uint64 `json:"caps"`
	// NoNewPrivs sets no_new_privs (allowPrivilegeEscalation: false).
	NoNewPrivs bool `json:"noNewPrivs,omitempty"`
	// Seccomp is a compiled seccomp filter: struct sock_filter entries in
	// native byte order. Empty means unconfined.
	Seccomp []byte `json:"seccomp,omitempty"`
	// ReadOnlyRoot makes the root filesystem read-only; the container's
	// volumes keep their own setting.
	ReadOnlyRoot bool `json:"readOnlyRoot,omitempty"`
	// MaskedPaths are hidden (an empty read-only tmpfs or /dev/null on
	// top); ReadonlyPaths are made read-only. Missing paths are skipped.
	MaskedPaths   []string `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string `json:"readonlyPaths,omitempty"`
	// Sysctls are set in the container's namespaces; one whose namespace
	// is the host's (HostNamespaces: namespace name → inode, as the agent
	// saw them) fails the start rather than change the host.
	Sysctls        map[string]string `json:"sysctls,omitempty"`
	HostNamespaces map[string]uint64 `json:"hostNamespaces,omitempty"`
}

// sockFilterSize is the size of one struct sock_filter.
const sockFilterSize = 8

// EncodeSeccomp packs BPF instructions (code, jt, jf, k) as Security.Seccomp
// holds them.
func EncodeSeccomp(code []uint16, jt, jf []uint8, k []uint32) []byte {
	out := make([]byte, 0, len(code)*sockFilterSize)
	for i := range code {
		out = binary.NativeEndian.AppendUint16(out, code[i])
		out = append(out, jt[i], jf[i])
		out = binary.NativeEndian.AppendUint32(out, k[i])
	}
	return out
}

func decodeSeccomp(b []byte) ([]unix.SockFilter, error) {
	if len(b) == 0 || len(b)%sockFilterSize != 0 || len(b)/sockFilterSize > 4096 {
		return nil, fmt.Errorf("seccomp filter of %d bytes is malformed", len(b))
	}
	out := make([]unix.SockFilter, len(b)/sockFilterSize)
	for i := range out {
		p := b[i*sockFilterSize:]
		out[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(p), Jt: p[2], Jf: p[3], K: binary.NativeEndian.Uint32(p[4:])}
	}
	return out, nil
}

// installSeccomp loads the filter on the calling thread (the one that
// execs: the filter is inherited across exec and by every child).
func installSeccomp(b []byte) error {
	filter, err := decodeSeccomp(b)
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	return nil
}

// dropPrivileges turns the init, root with every capability, into the
// container's process as far as the kernel's credentials go: seccomp (early
// when no_new_privs is off, as runc does: loading it needs CAP_SYS_ADMIN
// then), bounding set, groups and user, capability sets, no_new_privs and
// seccomp last otherwise. The caller has locked its OS thread and execs
// right after.
func dropPrivileges(sec *Security, cred *syscall.Credential) error {
	if len(sec.Seccomp) > 0 && !sec.NoNewPrivs {
		if err := installSeccomp(sec.Seccomp); err != nil {
			return err
		}
	}
	caps := sec.Caps
	if sec.Privileged {
		var err error
		if caps, err = ProcBoundingSet("self"); err != nil {
			return err
		}
	} else if err := limitBoundingSet(caps); err != nil {
		return err
	}
	if cred.Uid != 0 {
		// Keep the permitted set across setuid; it is cut to caps below
		// and the kernel empties it at exec for a non-root user.
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("keep capabilities: %w", err)
		}
	}
	if err := setCredential(cred); err != nil {
		return err
	}
	if err := setCapabilities(caps); err != nil {
		return err
	}
	if sec.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
		if len(sec.Seccomp) > 0 {
			return installSeccomp(sec.Seccomp)
		}
	}
	return nil
}

// setCapabilities sets the calling thread's permitted and effective sets to
// caps (within the bounding set), and empties its inheritable and ambient
// sets, as containerd does since inheritable capabilities were found to
// leak into setuid programs.
func setCapabilities(caps uint64) error {
	if bnd, err := ProcBoundingSet("thread-self"); err == nil {
		caps &= bnd
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for i := range data {
		data[i].Permitted = uint32(caps >> (32 * i))
		data[i].Effective = data[i].Permitted
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("set capabilities %016x: %w", caps, err)
	}
	return nil
}
