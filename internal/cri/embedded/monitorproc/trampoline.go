package monitorproc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/minilet/minilet/internal/cm/cgroups"

	"golang.org/x/sys/unix"
)

// runTrampoline is the exec helper: it joins the container's cgroups (their
// directories in argv before "--") and, where the container has them, its
// namespaces, then replaces itself with the command after "--".
// Failures before exec are reported on fd 3, which exec closes otherwise.
func runTrampoline() int {
	report := os.NewFile(3, "report")
	syscall.CloseOnExec(3)
	fail := func(err error) int {
		_, _ = report.WriteString(err.Error())
		return 127
	}
	args := os.Args[1:]
	sep := -1
	for i, a := range args {
		if a == "--" {
			sep = i
			break
		}
	}
	if sep < 0 || sep == len(args)-1 {
		return fail(fmt.Errorf("trampoline: no command"))
	}
	for _, dir := range args[:sep] {
		if err := cgroups.JoinDir(dir, os.Getpid()); err != nil {
			return fail(fmt.Errorf("join cgroup %s: %w", dir, err))
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, TrampolineEnv) {
			env = append(env, kv)
		}
	}
	argv := args[sep+1:]
	sec, err := decodeExecSecurity(os.Getenv(TrampolineSecEnv))
	if err != nil {
		return fail(err)
	}
	if pid := os.Getenv(TrampolinePidEnv); pid != "" {
		return execInContainer(pid, os.Getenv(TrampolineDirEnv), argv, env, sec, report, fail)
	}
	var cred *syscall.Credential
	if pid := os.Getenv(TrampolineMntEnv); pid != "" {
		if err := enterMountNamespace(pid, os.Getenv(TrampolineDirEnv)); err != nil {
			return fail(err)
		}
		if sec != nil {
			if cred, err = procCredential(pid); err != nil {
				return fail(err)
			}
		}
	}
	path, err := LookPath(argv[0], env)
	if err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := dropPrivileges(sec, cred); err != nil {
			return fail(err)
		}
	}
	return fail(syscall.Exec(path, argv, env))
}

// enterMountNamespace moves the calling thread, which execs the command
// next, into the network, UTS, IPC and mount namespaces of a host-image
// container's process pid,
// and into dir there. The kernel refuses setns into a mount namespace to a
// thread sharing its root and working directory with others, as the Go
// runtime's threads do: the thread takes a private copy of those first
// (unshare CLONE_FS), and stays locked so that the exec happens on it.
func enterMountNamespace(pid, dir string) error {
	runtime.LockOSThread()
	if err := joinNamespacesOf(pid); err != nil {
		return err
	}
	f, err := os.Open("/proc/" + pid + "/ns/mnt")
	if err != nil {
		return fmt.Errorf("container is gone: %w", err)
	}
	defer func() { _ = f.Close() }()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare filesystem attributes: %w", err)
	}
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter mount namespace: %w", err)
	}
	// setns left the thread at the namespace's root.
	if dir == "" {
		dir = "/"
	}
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("working directory %s: %w", dir, err)
	}
	return nil
}

// execInContainer runs argv inside the container whose init is pid: in its
// network, UTS, IPC and PID namespaces, chrooted into its root (through
// /proc/PID/root, which shows the container's mounts), as the user its PID 1
// runs as. The command stays in the host's mount namespace (it does not
// join the container's as enterMountNamespace does), which only its
// /proc/self/mounts can tell. The trampoline waits for it and exits with
// its status.
func execInContainer(pid, dir string, argv, env []string, sec *Security, report *os.File, fail func(error) int) int {
	runtime.LockOSThread() // setns below is per thread; the child forks from it
	cred, err := procCredential(pid)
	if err != nil {
		return fail(err)
	}
	// The command gets no capability the container lacks.
	bnd, err := ProcBoundingSet(pid)
	if err != nil {
		return fail(fmt.Errorf("container is gone: %w", err))
	}
	if err := limitBoundingSet(bnd); err != nil {
		return fail(err)
	}
	if err := joinNamespacesOf(pid); err != nil {
		return fail(err)
	}
	if !sameNamespace("/proc/"+pid+"/ns/pid", "/proc/thread-self/ns/pid") {
		if err := setnsPath("/proc/"+pid+"/ns/pid", unix.CLONE_NEWPID); err != nil {
			return fail(fmt.Errorf("enter the container's pid namespace: %w", err))
		}
	}
	if err := syscall.Chroot("/proc/" + pid + "/root"); err != nil {
		return fail(fmt.Errorf("enter container root: %w", err))
	}
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return fail(fmt.Errorf("working directory %s: %w", dir, err))
	}
	path, err := LookPath(argv[0], env)
	if err != nil {
		return fail(err)
	}
	// no_new_privs and the seccomp filter pass to the child through fork
	// from this (locked) thread; its user is set in the child, and the
	// kernel gives it the bounding set's capabilities at exec if it is
	// root, none otherwise.
	if sec != nil && (sec.NoNewPrivs || len(sec.Seccomp) > 0) {
		if sec.NoNewPrivs {
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				return fail(fmt.Errorf("set no_new_privs: %w", err))
			}
		}
		if len(sec.Seccomp) > 0 {
			if err := installSeccomp(sec.Seccomp); err != nil {
				return fail(err)
			}
		}
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Credential: cred}}
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	// Set-up is over: closing the report tells the agent the command runs
	// (its timeout starts now).
	_ = report.Close()
	_ = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// procCredential is the user, group and supplementary groups pid runs as.
func procCredential(pid string) (*syscall.Credential, error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return nil, fmt.Errorf("container is gone: %w", err)
	}
	cred := &syscall.Credential{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		switch {
		case k == "Uid" && len(f) > 0:
			n, _ := strconv.ParseUint(f[0], 10, 32)
			cred.Uid = uint32(n)
		case k == "Gid" && len(f) > 0:
			n, _ := strconv.ParseUint(f[0], 10, 32)
			cred.Gid = uint32(n)
		case k == "Groups":
			for _, g := range f {
				n, _ := strconv.ParseUint(g, 10, 32)
				cred.Groups = append(cred.Groups, uint32(n))
			}
		}
	}
	return cred, nil
}
