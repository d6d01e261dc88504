package monitorproc

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// The exec helper confines a command with the part of the container's
// Security that applies to a process joining it: capabilities (or
// privileged), no_new_privs and the compiled seccomp filter. The agent hands
// it over in TrampolineSecEnv, encoded by EncodeExecSecurity, so that the
// helper (the monitor binary's trampoline or the small C helper of
// cmd/minilet-exec) reads no state file and decodes no JSON per exec:
//
//	CAPS:FLAGS:SECCOMP
//
// CAPS is Security.Caps as 16 hex digits; FLAGS holds 'p' for Privileged
// and 'n' for NoNewPrivs; SECCOMP is Security.Seccomp in hex (empty: none).

// EncodeExecSecurity is sec in TrampolineSecEnv's format.
func EncodeExecSecurity(sec *Security) string {
	flags := ""
	if sec.Privileged {
		flags += "p"
	}
	if sec.NoNewPrivs {
		flags += "n"
	}
	return fmt.Sprintf("%016x:%s:%s", sec.Caps, flags, hex.EncodeToString(sec.Seccomp))
}

// decodeExecSecurity reads TrampolineSecEnv's value; "" is no Security.
func decodeExecSecurity(v string) (*Security, error) {
	if v == "" {
		return nil, nil
	}
	f := strings.Split(v, ":")
	if len(f) != 3 || len(f[0]) != 16 {
		return nil, fmt.Errorf("container's security context: malformed %s", TrampolineSecEnv)
	}
	caps, err := strconv.ParseUint(f[0], 16, 64)
	if err != nil {
		return nil, fmt.Errorf("container's security context: capabilities: %w", err)
	}
	sec := &Security{Caps: caps, Privileged: strings.Contains(f[1], "p"), NoNewPrivs: strings.Contains(f[1], "n")}
	if sec.Seccomp, err = hex.DecodeString(f[2]); err != nil {
		return nil, fmt.Errorf("container's security context: seccomp filter: %w", err)
	}
	if len(sec.Seccomp) > 0 {
		if _, err := decodeSeccomp(sec.Seccomp); err != nil {
			return nil, err
		}
	}
	return sec, nil
}
