package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// upstreamKubeletSysctls are the kernel tunables the upstream kubelet sets
// (or, with protectKernelDefaults, requires) and their values.
var upstreamKubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// UpstreamKubeletOptions say how an upstream kubelet run beside the
// agent is kept off the host.
type UpstreamKubeletOptions struct {
	// Tmpfs are directories (e.g. /var/log, where it links container logs
	// whatever its podLogsDir) that get an empty tmpfs of their own.
	Tmpfs []string
	// Shared is a directory whose mounts must reach the host: the
	// kubelet's root dir in a cluster, where it mounts the volumes
	// (tmpfs for secrets, projected tokens, ...) that the runtime, in the
	// host's mount namespace, binds into containers. It becomes a shared
	// mount of its own, and the kubelet's namespace keeps the host's
	// propagation (only /proc is made private there), so Tmpfs must then
	// be empty: on a host whose root is shared they would reach it too.
	Shared string
}

// UpstreamKubeletCommand is the command that runs the upstream kubelet at
// bin with args, for a side-by-side run on this host that must not change
// the host: in a mount namespace of its own, where the kernel tunables it
// wants (run it with protectKernelDefaults: true) are files under dir
// bind-mounted over /proc/sys, so it neither writes them nor refuses to
// start; see UpstreamKubeletOptions for the rest. Its process group is its
// own, so one signal ends all it started.
func UpstreamKubeletCommand(dir, bin string, opts UpstreamKubeletOptions, args ...string) (*exec.Cmd, error) {
	if opts.Shared != "" && len(opts.Tmpfs) > 0 {
		return nil, fmt.Errorf("upstream kubelet: a Shared directory and Tmpfs %v cannot go together", opts.Tmpfs)
	}
	sys := filepath.Join(dir, "sysctl")
	if err := os.MkdirAll(sys, 0o755); err != nil {
		return nil, err
	}
	unshare := []string{"-m"}
	script := "set -e\nmount --make-rprivate /\n"
	if opts.Shared != "" {
		unshare = append(unshare, "--propagation", "unchanged")
		script = "set -e\nmount --make-rprivate /proc\n"
	}
	for _, d := range opts.Tmpfs {
		script += fmt.Sprintf("mount -t tmpfs tmpfs %s\n", d)
	}
	for key, val := range upstreamKubeletSysctls {
		f := filepath.Join(sys, strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(f, []byte(val+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("kernel tunable %s for the kubelet: %w", key, err)
		}
		script += fmt.Sprintf("mount --bind %s /proc/sys/%s\n", f, key)
	}
	script += `exec "$@"` + "\n"
	cmd := exec.Command("unshare", append(append(unshare, "--", "/bin/sh", "-c", script, "sh", bin), args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// shareMounts makes dir a shared mount of its own (a bind mount onto
// itself), so that mounts made under it in a mount namespace copied from
// this one reach this one, and undoes it (with whatever is still mounted
// below) when tb ends.
func shareMounts(tb testing.TB, dir string) error {
	for _, args := range [][]string{{"--bind", dir, dir}, {"--make-shared", dir}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("mount %v: %v: %s", args, err, out)
		}
	}
	tb.Cleanup(func() { _ = exec.Command("umount", "-R", "-l", dir).Run() })
	return nil
}

// UpstreamKubelet is an upstream kubelet started by StartUpstreamKubelet.
type UpstreamKubelet struct {
	// Pid is its process (unshare and the shell exec into it).
	Pid int
	// Done is closed once it has exited.
	Done    <-chan struct{}
	logPath string
}

// Log is the end of its log: at most max bytes.
func (k *UpstreamKubelet) Log(max int) string {
	raw, _ := os.ReadFile(k.logPath)
	if len(raw) > max {
		raw = raw[len(raw)-max:]
	}
	return string(raw)
}

// StartUpstreamKubelet starts UpstreamKubeletCommand(dir, bin, opts,
// args...) with its output in dir/kubelet.log, and stops it when tb ends
// (TERM to its process group, KILL after 20 s; cleanups registered
// before this call run after it).
func StartUpstreamKubelet(tb testing.TB, dir, bin string, opts UpstreamKubeletOptions, args ...string) (*UpstreamKubelet, error) {
	cmd, err := UpstreamKubeletCommand(dir, bin, opts, args...)
	if err != nil {
		return nil, err
	}
	if opts.Shared != "" {
		if err := shareMounts(tb, opts.Shared); err != nil {
			return nil, err
		}
	}
	k := &UpstreamKubelet{logPath: filepath.Join(dir, "kubelet.log")}
	logf, err := os.Create(k.logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("starting the kubelet: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	k.Pid, k.Done = cmd.Process.Pid, done
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return k, nil
}

// MakeCgroupRoot creates cgroup directory root (e.g. /some-kubelet) in
// every mounted hierarchy, as the kubelet requires of its cgroupRoot.
func MakeCgroupRoot(root string) error {
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	for _, p := range ctrls {
		if err := os.MkdirAll(filepath.Join(filepath.Dir(p), root), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// RemoveCgroupRoot removes cgroupRoot and everything below it in every
// hierarchy, deepest first (the pods' processes are gone by then).
func RemoveCgroupRoot(cgroupRoot string) {
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	for _, p := range ctrls {
		root := filepath.Join(filepath.Dir(p), cgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}
