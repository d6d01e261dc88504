package monitorproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
)

// runMonitor supervises one container process: it starts it inside the
// container cgroup, copies its output to the CRI log, waits for it and writes
// the exit record. It outlives the agent (own session).
func runMonitor(dir string) int {
	// fd 3 is the agent's "started" pipe; the container must not inherit it.
	syscall.CloseOnExec(3)
	notify := os.NewFile(3, "started")
	var spec Spec
	if err := statefile.Read(filepath.Join(dir, FileSpec), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "monitor:", err)
		return 2
	}
	// Out of the agent's cgroups first: the monitor must outlive them.
	for _, h := range spec.MonitorCgroupDirs {
		if err := cgroups.JoinDir(h.Dir, os.Getpid()); err != nil {
			fmt.Fprintln(os.Stderr, "monitor: join the monitors' cgroup:", err)
		}
	}
	// Signals aimed at the monitor must not kill it: the container would be
	// orphaned without an exit record. Caught (not ignored) signals revert to
	// their defaults in the child at exec.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGUSR1)

	out := &logWriter{path: spec.LogPath}
	if err := out.open(); err != nil {
		return failStart(dir, notify, fmt.Errorf("open log %s: %w", spec.LogPath, err))
	}
	oomBefore := cgroups.OOMCount(spec.MemoryDir, spec.CgroupV2)

	var stdinR, stdinW *os.File
	if spec.Stdin {
		var err error
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return failStart(dir, notify, err)
		}
	}
	cmd, stdout, stderr, err := startInCgroup(dir, &spec, stdinR)
	if stdinR != nil {
		_ = stdinR.Close()
	}
	if err != nil {
		return failStart(dir, notify, err)
	}
	if stdinW != nil {
		stopStdin, err := serveStdin(dir, stdinW, spec.StdinOnce)
		if err != nil {
			fmt.Fprintln(os.Stderr, "monitor: stdin socket:", err)
		} else {
			defer stopStdin()
		}
	}
	if spec.OOMScoreAdj != nil {
		// Fails for negative values without CAP_SYS_RESOURCE; the agent
		// already warned about that, the container runs regardless.
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid), []byte(strconv.FormatInt(*spec.OOMScoreAdj, 10)), 0o644)
	}
	self := os.Getpid()
	ticks, _ := ProcStartTicks(self)
	ctrTicks, _ := ProcStartTicks(cmd.Process.Pid)
	if err := statefile.WriteVolatile(filepath.Join(dir, FileStart), StartRecord{
		MonitorPid: self, MonitorTicks: ticks, Pid: cmd.Process.Pid, Ticks: ctrTicks, BootID: BootID(),
		StartedAt: time.Now().UnixNano(),
	}); err != nil {
		fmt.Fprintln(os.Stderr, "monitor: write start record:", err)
	}
	_, _ = notify.Write([]byte{1})
	_ = notify.Close()

	var copying sync.WaitGroup
	copying.Add(2)
	go func() { defer copying.Done(); out.copyStream("stdout", stdout) }()
	go func() { defer copying.Done(); out.copyStream("stderr", stderr) }()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var waitErr error
	for done := false; !done; {
		select {
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				if err := out.reopen(); err != nil {
					fmt.Fprintln(os.Stderr, "monitor: reopen log:", err)
				}
			}
		case waitErr = <-waited:
			done = true
		}
	}
	// The container ends with its main process: whatever it left behind in
	// its process group or cgroup goes too, which also closes the pipes.
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, h := range spec.CgroupDirs {
		_ = cgroups.KillDir(h.Dir)
	}
	drained := make(chan struct{})
	go func() { copying.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		// Something escaped both the group and the cgroup with our pipe.
		_ = stdout.SetReadDeadline(time.Now())
		_ = stderr.SetReadDeadline(time.Now())
		<-drained
	}
	out.close()

	rec := ExitRecord{FinishedAt: time.Now().UnixNano(), Reason: ReasonCompleted}
	var status syscall.WaitStatus
	if cmd.ProcessState != nil {
		status, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	switch {
	case cmd.ProcessState == nil:
		rec.ExitCode, rec.Reason, rec.Message = 255, ReasonError, fmt.Sprintf("wait: %v", waitErr)
	case status.Signaled():
		rec.ExitCode = 128 + int32(status.Signal())
		rec.Reason = ReasonError
		rec.Message = "killed by signal " + status.Signal().String()
	default:
		rec.ExitCode = int32(status.ExitStatus())
		if rec.ExitCode != 0 {
			rec.Reason = ReasonError
		}
	}
	// The kernel OOM-killed a process of the container's cgroup and the
	// container failed: OOMKilled, as containerd reports it, whichever
	// process the kernel chose (a shell's child, e.g., leaves the shell to
	// exit 137 on its own).
	if after := cgroups.OOMCount(spec.MemoryDir, spec.CgroupV2); oomBefore >= 0 && after > oomBefore && rec.ExitCode != 0 {
		rec.Reason, rec.Message = ReasonOOMKilled, "the container exceeded its memory limit"
	}
	if err := statefile.WriteVolatile(filepath.Join(dir, FileExit), rec); err != nil {
		fmt.Fprintln(os.Stderr, "monitor: write exit record:", err)
		return 1
	}
	return 0
}

// startInCgroup starts the container process inside its cgroup. The monitor
// joins the container cgroup, forks (the child inherits the cgroup before it
// execs anything), and moves itself back to where it came from so that its
// own memory is not charged to the container.
func startInCgroup(dir string, spec *Spec, stdin *os.File) (*exec.Cmd, *os.File, *os.File, error) {
	if len(spec.Args) == 0 {
		return nil, nil, nil, fmt.Errorf("no command")
	}
	var path string
	var initReport, initNotify *os.File
	var err error
	if !needsInit(spec) {
		if path, err = LookPath(spec.Args[0], spec.Env); err != nil {
			return nil, nil, nil, err
		}
	} else if initReport, initNotify, err = os.Pipe(); err != nil {
		return nil, nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, nil, nil, err
	}
	defer func() { _ = devnull.Close() }()
	in := devnull
	if stdin != nil {
		in = stdin
	}
	cmd := &exec.Cmd{
		Path: path, Args: spec.Args, Env: spec.Env, Dir: spec.WorkingDir,
		Stdin: in, Stdout: outW, Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if needsInit(spec) {
		defer func() { _ = initReport.Close() }()
		cmd.Path, cmd.Args, cmd.Dir = "/proc/self/exe", []string{initArg0}, ""
		cmd.Env = []string{initEnv + "=" + filepath.Join(dir, FileSpec)}
		cmd.ExtraFiles = []*os.File{initNotify}
		cmd.SysProcAttr.Cloneflags = cloneFlags(spec)
	}
	// A container of a pod with a shared PID namespace is forked into it:
	// the thread that forks enters it first (setns into a PID namespace
	// sets where that thread's children go).
	if p := spec.Pod.Join["pid"]; p != "" {
		runtime.LockOSThread()
		if err := setnsPath(p, syscall.CLONE_NEWPID); err != nil {
			return nil, nil, nil, fmt.Errorf("enter the pod's pid namespace: %w", err)
		}
	}
	home := ownCgroups(spec.CgroupDirs)
	for _, h := range spec.CgroupDirs {
		if err := cgroups.JoinDir(h.Dir, os.Getpid()); err != nil {
			returnHome(home)
			return nil, nil, nil, fmt.Errorf("join cgroup %s: %w", h.Dir, err)
		}
	}
	err = cmd.Start()
	returnHome(home)
	_ = outW.Close()
	_ = errW.Close()
	if initNotify != nil {
		_ = initNotify.Close()
	}
	if err == nil && initReport != nil {
		// The init reports a setup failure, or closes the pipe by exec.
		if msg, _ := io.ReadAll(initReport); len(msg) > 0 {
			_ = cmd.Wait()
			err = errors.New(string(msg))
		}
	}
	if err != nil {
		_ = outR.Close()
		_ = errR.Close()
		return nil, nil, nil, err
	}
	return cmd, outR, errR, nil
}

// needsInit reports whether the container starts through the container
// init: containers from images, and host-image containers with mounts, a
// security context to enforce or pod namespaces to join (which get a mount
// namespace of their own). Others run their command directly, in the
// host's namespaces.
func needsInit(spec *Spec) bool {
	return spec.Rootfs != nil || len(spec.Mounts) > 0 || spec.Security != nil || !spec.Pod.Empty()
}

// ownCgroups are the directories of the cgroups this process is in now,
// in the hierarchies of dirs.
func ownCgroups(dirs []CgroupDir) []string {
	var out []string
	for _, h := range dirs {
		if rel, ok := cgroups.Self(h.Controller); ok {
			out = append(out, filepath.Join(h.Root, rel))
		}
	}
	return out
}

func returnHome(dirs []string) {
	for _, d := range dirs {
		_ = cgroups.JoinDir(d, os.Getpid())
	}
}

func failStart(dir string, notify *os.File, cause error) int {
	now := time.Now().UnixNano()
	self := os.Getpid()
	ticks, _ := ProcStartTicks(self)
	_ = statefile.WriteVolatile(filepath.Join(dir, FileExit), ExitRecord{ExitCode: 128, FinishedAt: now, Reason: ReasonStartError, Message: cause.Error()})
	_ = statefile.WriteVolatile(filepath.Join(dir, FileStart), StartRecord{MonitorPid: self, MonitorTicks: ticks, StartedAt: now, Error: cause.Error()})
	_, _ = notify.Write([]byte{0})
	_ = notify.Close()
	return 0
}

// logWriter writes CRI-format log lines: "RFC3339Nano stream F|P content".
type logWriter struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

// maxLogLine is the longest content of one log line; longer lines are split
// into partial (P) lines.
const maxLogLine = 16 * 1024

func (w *logWriter) open() error {
	if w.path == "" {
		return nil
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	w.f = f
	return nil
}

func (w *logWriter) reopen() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
	return w.open()
}

func (w *logWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		_ = w.f.Close()
		w.f = nil
	}
}

func (w *logWriter) copyStream(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			// A line without its newline is partial: too long for the
			// buffer, or the last output of the stream (as containerd
			// writes it, so that readers give it back without a newline).
			tag := "P"
			content := line
			if line[len(line)-1] == '\n' {
				tag = "F"
				content = line[:len(line)-1]
			}
			w.write(stream, tag, content)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

func (w *logWriter) write(stream, tag string, content []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return
	}
	buf := make([]byte, 0, len(content)+64)
	buf = time.Now().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, ' ')
	buf = append(buf, stream...)
	buf = append(buf, ' ')
	buf = append(buf, tag...)
	buf = append(buf, ' ')
	buf = append(buf, content...)
	buf = append(buf, '\n')
	_, _ = w.f.Write(buf)
}
