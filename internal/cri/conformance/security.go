package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The security context, proved from inside the container: what `id` says,
// the capability sets, no_new_privs and seccomp mode the kernel reports in
// /proc/self/status, whether / takes a write. The reports come from a
// program the container's shell runs, so they show what the container's
// processes get after exec (a non-root user's capabilities are emptied
// there, as under runc).

// defaultCaps is containerd's default capability set: CHOWN DAC_OVERRIDE
// FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP SETPCAP
// NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE.
const defaultCaps = 0xa80425fb

// securityReport is what the probe script prints, one "key: value" a line.
const securityScript = `echo "uid: $(id -u)"; echo "gid: $(id -g)"; echo "groups: $(id -G)"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -s ' \t' ' '
echo "procsys: $(awk '$2=="/proc/sys" {split($4, o, ","); print o[1]}' /proc/self/mounts | tail -n 1)"
echo "timer_list: $(wc -c < /proc/timer_list 2>/dev/null || echo unreadable)"`

// The masked and read-only paths the kubelet sends for procMount Default.
var (
	kubeletMaskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
	kubeletReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

type securityCase struct {
	name string
	sc   *runtimeapi.LinuxContainerSecurityContext
	want map[string]string
}

func (s *suite) testSecurityContext(t *testing.T) {
	host := ownBoundingSet(t)
	caps := func(mask uint64) string { return fmt.Sprintf("%016x", mask&host) }
	localDeny := filepath.Join(t.TempDir(), "deny-mkdir.json")
	if err := os.WriteFile(localDeny, []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []securityCase{
		{"default", nil, map[string]string{
			"uid": "0", "CapEff": caps(defaultCaps), "CapPrm": caps(defaultCaps), "CapBnd": caps(defaultCaps),
			"CapInh": caps(0), "CapAmb": caps(0), "NoNewPrivs": "0", "Seccomp": "0"}},
		{"procMount Default", &runtimeapi.LinuxContainerSecurityContext{MaskedPaths: kubeletMaskedPaths, ReadonlyPaths: kubeletReadonlyPaths},
			map[string]string{"procsys": "ro", "timer_list": "0"}},
		{"runAsUser and groups", &runtimeapi.LinuxContainerSecurityContext{
			RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 3000}, SupplementalGroups: []int64{4000}},
			map[string]string{"uid": "1000", "gid": "3000", "groups": "3000 4000", "CapEff": caps(0), "CapPrm": caps(0), "CapBnd": caps(defaultCaps)}},
		{"add and drop", &runtimeapi.LinuxContainerSecurityContext{Capabilities: &runtimeapi.Capability{
			AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"CHOWN", "KILL"}}},
			map[string]string{"uid": "0", "CapEff": caps((defaultCaps | 1<<12) &^ (1<<0 | 1<<5)), "CapBnd": caps((defaultCaps | 1<<12) &^ (1<<0 | 1<<5))}},
		{"drop ALL", &runtimeapi.LinuxContainerSecurityContext{Capabilities: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}}},
			map[string]string{"uid": "0", "CapEff": caps(0), "CapPrm": caps(0), "CapBnd": caps(0)}},
		{"privileged", &runtimeapi.LinuxContainerSecurityContext{Privileged: true},
			map[string]string{"uid": "0", "CapEff": caps(^uint64(0)), "CapBnd": caps(^uint64(0)), "Seccomp": "0", "NoNewPrivs": "0"}},
		{"no_new_privs", &runtimeapi.LinuxContainerSecurityContext{NoNewPrivs: true, RunAsUser: &runtimeapi.Int64Value{Value: 1000}},
			map[string]string{"uid": "1000", "NoNewPrivs": "1", "CapEff": caps(0)}},
		{"seccomp RuntimeDefault", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}},
			map[string]string{"uid": "0", "Seccomp": "2", "CapEff": caps(defaultCaps)}},
		{"seccomp RuntimeDefault with no_new_privs", &runtimeapi.LinuxContainerSecurityContext{NoNewPrivs: true, RunAsUser: &runtimeapi.Int64Value{Value: 1000},
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}},
			map[string]string{"uid": "1000", "Seccomp": "2", "NoNewPrivs": "1"}},
		{"seccomp Unconfined", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}},
			map[string]string{"Seccomp": "0"}},
		{"seccomp Localhost", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{
			ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: localDeny}},
			map[string]string{"Seccomp": "2", "mkdir": "denied"}},
	}
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	// As the kubelet does, a privileged container runs in a privileged
	// sandbox (containerd refuses it elsewhere).
	privileged := s.newPodWith(t, rt, nil, func(cfg *runtimeapi.PodSandboxConfig) {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
	})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			script := securityScript
			if _, ok := tc.want["mkdir"]; ok {
				script += "\n" + `d=$(mktemp -u /tmp/minilet-seccomp-XXXXXX); if mkdir "$d" 2>/dev/null; then rmdir "$d"; echo "mkdir: allowed"; else echo "mkdir: denied"; fi`
			}
			cfg := s.containerConfig(fmt.Sprintf("sec%d", i), "/bin/sh", "-c", script)
			cfg.Linux.SecurityContext = tc.sc
			in := p
			if tc.sc.GetPrivileged() {
				in = privileged
			}
			got := s.runReport(t, rt, in, cfg)
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("%s: %q, want %q (report %v)", k, got[k], want, got)
				}
			}
		})
	}
}

// runReport runs cfg to its end (exit 0 wanted) and returns the "key:
// value" lines it printed.
func (s *suite) runReport(t *testing.T, rt *rtHandle, p *pod, cfg *runtimeapi.ContainerConfig) map[string]string {
	t.Helper()
	id := s.run(t, rt, p, cfg)
	st := waitState(t, rt, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	lines := readLog(t, filepath.Join(p.logDir, cfg.GetLogPath()))
	if st.GetExitCode() != 0 {
		t.Fatalf("exit code %d (reason %q, message %q), log %v", st.GetExitCode(), st.GetReason(), st.GetMessage(), lines)
	}
	out := map[string]string{}
	for _, l := range logText(lines, "stdout") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// testReadOnlyRoot: with readonlyRootfs a write to / fails with EROFS,
// while a volume stays writable (and a read-only volume does not).
func (s *suite) testReadOnlyRoot(t *testing.T) {
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	vol, roVol := t.TempDir(), t.TempDir()
	probe := "/minilet-readonly-probe-" + strconv.Itoa(os.Getpid())
	cfg := s.containerConfig("ro", "/bin/sh", "-c", `
if err=$( { echo x > `+probe+`; } 2>&1 ); then rm -f `+probe+`; echo "root: writable"; else echo "root: $(echo "$err" | grep -o 'Read-only file system')"; fi
if echo x > /vol/out; then echo "vol: writable"; else echo "vol: failed"; fi
if echo x > /rovol/out 2>/dev/null; then echo "rovol: writable"; else echo "rovol: read-only"; fi`)
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true}
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", HostPath: vol}, {ContainerPath: "/rovol", HostPath: roVol, Readonly: true}}
	got := s.runReport(t, rt, p, cfg)
	// The probe must never land on the host's root (the host image).
	if _, err := os.Stat(probe); err == nil {
		_ = os.Remove(probe)
		t.Errorf("a read-only container wrote %s on the host", probe)
	}
	for k, want := range map[string]string{"root": "Read-only file system", "vol": "writable", "rovol": "read-only"} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q (report %v)", k, got[k], want, got)
		}
	}
	if b, err := os.ReadFile(filepath.Join(vol, "out")); err != nil || string(b) != "x\n" {
		t.Errorf("volume file %q, %v; want x", b, err)
	}
	// The host's own root stays writable: nothing leaked out of the
	// container's mount namespace.
	f, err := os.CreateTemp("/", ".minilet-conformance-")
	if err != nil {
		t.Fatalf("the host's / is not writable after a read-only container: %v", err)
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
}

// testSeccompLocalhostMissing: a Localhost profile that does not exist
// keeps the container from running.
func (s *suite) testSeccompLocalhostMissing(t *testing.T) {
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	cfg := s.containerConfig("missing", "/bin/sh", "-c", "echo ran")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{
		ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: filepath.Join(t.TempDir(), "nope.json")}}
	ctx := context.Background()
	id, err := rt.CreateContainer(ctx, p.id, cfg, p.config)
	if err == nil {
		err = rt.StartContainer(ctx, id)
	}
	if err == nil {
		t.Fatalf("a container with a missing Localhost seccomp profile started")
	}
}

// testSysctls: a namespaced sysctl of the pod is set in the container's
// namespace, or the container does not start; the host's value never
// changes.
func (s *suite) testSysctls(t *testing.T) {
	const key, file = "kernel.shm_rmid_forced", "/proc/sys/kernel/shm_rmid_forced"
	before, err := os.ReadFile(file)
	if err != nil {
		t.Skipf("no %s: %v", file, err)
	}
	want := "1"
	if strings.TrimSpace(string(before)) == "1" {
		want = "0"
	}
	rt := s.runtime(t)
	p := s.newPodWith(t, rt, nil, func(cfg *runtimeapi.PodSandboxConfig) { cfg.Linux.Sysctls = map[string]string{key: want} })
	cfg := s.containerConfig("sysctl", "/bin/sh", "-c", "echo \"value: $(cat "+file+")\"")
	ctx := context.Background()
	id, err := rt.CreateContainer(ctx, p.id, cfg, p.config)
	if err == nil {
		err = rt.StartContainer(ctx, id)
	}
	if err != nil {
		// Refused: the runtime cannot give this container its own IPC
		// namespace. The error names the sysctl.
		if !strings.Contains(err.Error(), key) {
			t.Errorf("refused with %v, which does not name %s", err, key)
		}
	} else {
		st := waitState(t, rt, id, runtimeapi.ContainerState_CONTAINER_EXITED)
		lines := logText(readLog(t, filepath.Join(p.logDir, cfg.GetLogPath())), "stdout")
		if st.GetExitCode() != 0 || len(lines) != 1 || lines[0] != "value: "+want {
			t.Errorf("container saw %v (exit %d), want value: %s", lines, st.GetExitCode(), want)
		}
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		_ = os.WriteFile(file, before, 0o644)
		t.Errorf("the host's %s changed from %q to %q", key, before, after)
	}
}

// ownBoundingSet is the test process's capability bounding set: no
// container gets more.
func ownBoundingSet(t *testing.T) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return 0
}

// testExecConfined: a command exec'd into a running container is confined
// as the container is: its user, capabilities, no_new_privs and seccomp.
func (s *suite) testExecConfined(t *testing.T) {
	rt := s.runtime(t)
	p := s.newPod(t, rt, nil)
	cfg := s.containerConfig("confined", "sleep", "1000")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser: &runtimeapi.Int64Value{Value: 1000}, NoNewPrivs: true,
		Seccomp:      &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		Capabilities: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}},
	}
	id := s.run(t, rt, p, cfg)
	t.Cleanup(func() { _ = rt.StopContainer(context.Background(), id, 0) })
	stdout, stderr, err := rt.ExecSync(context.Background(), id, []string{"/bin/sh", "-c", securityScript}, waitTimeout)
	if err != nil {
		t.Fatalf("ExecSync: %v (stderr %q)", err, stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(string(stdout), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	for k, want := range map[string]string{"uid": "1000", "NoNewPrivs": "1", "Seccomp": "2", "CapBnd": "0000000000000000", "CapEff": "0000000000000000"} {
		if got[k] != want {
			t.Errorf("exec's %s: %q, want %q (report %v)", k, got[k], want, got)
		}
	}
}
