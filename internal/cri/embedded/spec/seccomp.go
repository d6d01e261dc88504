package spec

import (
	"errors"
	"fmt"
	"os"
	"strings"

	seccompbpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"
	mobyseccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fieldSeccomp names the field in errors, as users write it.
const fieldSeccomp = "securityContext.seccompProfile"

// seccompFilter compiles a container's seccomp profile to the BPF program
// the container init loads: RuntimeDefault is Docker's and containerd's
// default profile (moby/profiles), resolved against the container's
// capabilities as they resolve it; Localhost a profile file in the same
// JSON format. Unconfined, or a privileged container, gets none (nil).
func seccompFilter(sc *runtimeapi.LinuxContainerSecurityContext, caps uint64) ([]byte, error) {
	if sc.GetPrivileged() {
		return nil, nil
	}
	kind, ref := seccompKind(sc)
	rs := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: capNames(caps)}}}
	var profile *specs.LinuxSeccomp
	var err error
	switch kind {
	case runtimeapi.SecurityProfile_Unconfined:
		return nil, nil
	case runtimeapi.SecurityProfile_RuntimeDefault:
		profile, err = mobyseccomp.GetDefaultProfile(rs)
	case runtimeapi.SecurityProfile_Localhost:
		var body []byte
		body, err = readProfile(ref)
		if err == nil {
			profile, err = mobyseccomp.LoadProfile(string(body), rs)
		}
	default:
		return nil, fmt.Errorf("field %s: unknown profile type %v: %w", fieldSeccomp, kind, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, fmt.Errorf("field %s: %w", fieldSeccomp, err)
	}
	if profile == nil { // an empty profile: seccomp disabled
		return nil, nil
	}
	prog, err := compileSeccomp(profile)
	if err != nil {
		return nil, fmt.Errorf("field %s: %w", fieldSeccomp, err)
	}
	return prog, nil
}

// maxProfileSize bounds a Localhost profile read.
const maxProfileSize = 4 << 20

func readProfile(path string) ([]byte, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("localhost profile %q is not an absolute path: %w", path, errdefs.ErrInvalidArgument)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("localhost profile: %w", err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxProfileSize {
		return nil, fmt.Errorf("localhost profile %s is not a regular file of at most %d bytes: %w", path, maxProfileSize, errdefs.ErrInvalidArgument)
	}
	buf := make([]byte, st.Size())
	n, err := f.Read(buf)
	if err != nil && n != len(buf) {
		return nil, fmt.Errorf("localhost profile %s: %w", path, err)
	}
	return buf[:n], nil
}

// seccompKind reads the profile from the security context: the typed field,
// or the deprecated path ("runtime/default", "docker/default",
// "unconfined", "localhost/<path>"). Unset means unconfined, as for the
// kubelet (which sends RuntimeDefault when its SeccompDefault is on).
func seccompKind(sc *runtimeapi.LinuxContainerSecurityContext) (runtimeapi.SecurityProfile_ProfileType, string) {
	if p := sc.GetSeccomp(); p != nil {
		return p.GetProfileType(), p.GetLocalhostRef()
	}
	switch path := sc.GetSeccompProfilePath(); { //nolint:staticcheck // older CRI clients still send it; ignoring it would run them unconfined
	case path == "runtime/default" || path == "docker/default":
		return runtimeapi.SecurityProfile_RuntimeDefault, ""
	case strings.HasPrefix(path, "localhost/"):
		return runtimeapi.SecurityProfile_Localhost, strings.TrimPrefix(path, "localhost")
	}
	return runtimeapi.SecurityProfile_Unconfined, ""
}

// compileSeccomp turns an OCI seccomp section into BPF: the rules in
// order, first match wins, the default action last. Syscalls this
// architecture does not know are skipped, as libseccomp does. Only the
// native architecture is allowed; other ABIs (x32, i386) get the default
// action for every call, which is stricter than libseccomp.
func compileSeccomp(p *specs.LinuxSeccomp) ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	def, err := seccompAction(p.DefaultAction, p.DefaultErrnoRet)
	if err != nil {
		return nil, fmt.Errorf("defaultAction: %w", err)
	}
	switch def {
	case seccompbpf.ActionAllow, seccompbpf.ActionErrno, seccompbpf.ActionKillThread, seccompbpf.ActionKillProcess,
		seccompbpf.ActionTrap, seccompbpf.ActionLog, seccompbpf.ActionTrace:
	default:
		return nil, fmt.Errorf("defaultAction %s with errno %d: only EPERM is supported as the default errno: %w", p.DefaultAction, *p.DefaultErrnoRet, errdefs.ErrInvalidArgument)
	}
	policy := seccompbpf.Policy{DefaultAction: def}
	for i, rule := range p.Syscalls {
		action, err := seccompAction(rule.Action, rule.ErrnoRet)
		if err != nil {
			return nil, fmt.Errorf("syscalls[%d]: %w", i, err)
		}
		conds, err := seccompConditions(rule.Args)
		if err != nil {
			return nil, fmt.Errorf("syscalls[%d]: %w", i, err)
		}
		group := seccompbpf.SyscallGroup{Action: action}
		seen := map[string]bool{}
		for _, name := range rule.Names {
			if _, ok := info.SyscallNames[name]; !ok || seen[name] {
				continue
			}
			seen[name] = true
			if conds == nil {
				group.Names = append(group.Names, name)
			} else {
				group.NamesWithCondtions = append(group.NamesWithCondtions, seccompbpf.NameWithConditions{Name: name, Conditions: conds})
			}
		}
		if len(group.Names)+len(group.NamesWithCondtions) > 0 {
			policy.Syscalls = append(policy.Syscalls, group)
		}
	}
	if len(policy.Syscalls) == 0 {
		// The library wants one rule; one that does what the default does
		// changes nothing.
		policy.Syscalls = []seccompbpf.SyscallGroup{{Action: def, Names: []string{"read"}}}
	}
	insns, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, err
	}
	if len(raw) > 4096 {
		return nil, fmt.Errorf("the profile compiles to %d BPF instructions, more than the kernel's 4096: %w", len(raw), errdefs.ErrInvalidArgument)
	}
	code, jt, jf, k := make([]uint16, len(raw)), make([]uint8, len(raw)), make([]uint8, len(raw)), make([]uint32, len(raw))
	for i, r := range raw {
		code[i], jt[i], jf[i], k[i] = r.Op, r.Jt, r.Jf, r.K
	}
	return monitorproc.EncodeSeccomp(code, jt, jf, k), nil
}

func seccompAction(a specs.LinuxSeccompAction, errnoRet *uint) (seccompbpf.Action, error) {
	switch a {
	case specs.ActAllow:
		return seccompbpf.ActionAllow, nil
	case specs.ActErrno:
		if errnoRet == nil || *errnoRet == 1 {
			return seccompbpf.ActionErrno, nil
		}
		if *errnoRet > 4095 {
			return 0, fmt.Errorf("errnoRet %d out of range: %w", *errnoRet, errdefs.ErrInvalidArgument)
		}
		return seccompbpf.ActionErrno | seccompbpf.Action(*errnoRet), nil
	case specs.ActKill, specs.ActKillThread:
		return seccompbpf.ActionKillThread, nil
	case specs.ActKillProcess:
		return seccompbpf.ActionKillProcess, nil
	case specs.ActTrap:
		return seccompbpf.ActionTrap, nil
	case specs.ActLog:
		return seccompbpf.ActionLog, nil
	case specs.ActTrace:
		return seccompbpf.ActionTrace, nil
	}
	return 0, fmt.Errorf("action %q is not supported: %w", a, errdefs.ErrInvalidArgument)
}

// seccompConditions are a rule's argument checks, all of which must hold;
// nil when there are none.
func seccompConditions(args []specs.LinuxSeccompArg) (seccompbpf.ArgumentConditions, error) {
	var out seccompbpf.ArgumentConditions
	for _, a := range args {
		c := seccompbpf.Condition{Argument: uint32(a.Index), Value: a.Value}
		switch a.Op {
		case specs.OpEqualTo:
			c.Operation = seccompbpf.Equal
		case specs.OpNotEqual:
			c.Operation = seccompbpf.NotEqual
		case specs.OpGreaterThan:
			c.Operation = seccompbpf.GreaterThan
		case specs.OpGreaterEqual:
			c.Operation = seccompbpf.GreaterOrEqual
		case specs.OpLessThan:
			c.Operation = seccompbpf.LessThan
		case specs.OpLessEqual:
			c.Operation = seccompbpf.LessOrEqual
		case specs.OpMaskedEqual:
			// (arg & mask) == 0 is "none of the mask's bits set"; other
			// masked comparisons have no equivalent here.
			if a.ValueTwo != 0 {
				return nil, fmt.Errorf("SCMP_CMP_MASKED_EQ with a non-zero value is not supported: %w", errdefs.ErrInvalidArgument)
			}
			c.Operation = seccompbpf.BitsNotSet
		default:
			return nil, fmt.Errorf("operator %q is not supported: %w", a.Op, errdefs.ErrInvalidArgument)
		}
		if a.Index > 5 {
			return nil, errors.New("argument index above 5")
		}
		out = append(out, c)
	}
	return out, nil
}

// capNames are the "CAP_..." names of the bits in mask.
func capNames(mask uint64) []string {
	var out []string
	for name, bit := range capNumbers {
		if mask&(1<<bit) != 0 {
			out = append(out, "CAP_"+name)
		}
	}
	return out
}
