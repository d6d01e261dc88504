package embedded

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
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Environment markers that turn a re-exec of /proc/self/exe into a monitor
// (value: the container's state directory) or an exec trampoline.
const (
	monitorEnv    = "MINILET_EMBEDDED_MONITOR"
	trampolineEnv = "MINILET_EMBEDDED_EXEC"
)

// State files in a container's directory.
const (
	fileContainer = "container.json" // containerRecord, written by the agent
	fileSpec      = "monitor.json"   // monitorSpec, written by the agent before start
	fileStart     = "start.json"     // startRecord, written by the monitor
	fileExit      = "exit.json"      // exitRecord, written by the monitor (or the agent if the monitor vanished)
	fileMonLog    = "monitor.log"    // the monitor's own stderr
)

// monitorSpec tells the monitor what to run.
type monitorSpec struct {
	Args        []string    `json:"args"`
	Env         []string    `json:"env"`
	WorkingDir  string      `json:"workingDir"`
	LogPath     string      `json:"logPath"` // absolute; empty discards output
	CgroupDirs  []cgroupDir `json:"cgroupDirs"`
	MemoryDir   string      `json:"memoryDir"` // memory cgroup dir, for OOM detection
	CgroupV2    bool        `json:"cgroupV2"`
	OOMScoreAdj *int64      `json:"oomScoreAdj,omitempty"`
	// Rootfs, when set, runs the container from an image: through the
	// container init, in its own namespaces and root filesystem.
	Rootfs *rootfsSpec `json:"rootfs,omitempty"`
}

// startRecord is the monitor's report that the container process runs (or
// could not be started).
type startRecord struct {
	MonitorPid   int    `json:"monitorPid"`
	MonitorTicks uint64 `json:"monitorTicks"` // start time of the monitor, against pid reuse
	Pid          int    `json:"pid"`
	StartedAt    int64  `json:"startedAt"`
	Error        string `json:"error,omitempty"`
}

// exitRecord is the final word on a container process.
type exitRecord struct {
	ExitCode   int32  `json:"exitCode"`
	FinishedAt int64  `json:"finishedAt"`
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
}

// Reasons reported in ContainerStatus.
const (
	reasonCompleted  = "Completed"
	reasonError      = "Error"
	reasonOOMKilled  = "OOMKilled"
	reasonStartError = "StartError"
)

// MaybeRunMonitor must be the first call in main() and in the TestMain of
// every test binary that uses this runtime. In the agent it returns at once;
// in a process the runtime re-executed as a container monitor or exec
// trampoline it does that job and exits without returning.
func MaybeRunMonitor() {
	if len(os.Args) == 0 {
		return
	}
	// Both the marker and argv[0] must match, so that a stray variable in
	// some environment never turns the agent into a monitor.
	if dir := os.Getenv(monitorEnv); dir != "" && os.Args[0] == monitorArg0 {
		runtime.GOMAXPROCS(1)
		debug.SetGCPercent(20)
		os.Exit(runMonitor(dir))
	}
	if os.Getenv(trampolineEnv) != "" && os.Args[0] == trampolineArg0 {
		os.Exit(runTrampoline())
	}
	if os.Getenv(initEnv) != "" && os.Args[0] == initArg0 {
		os.Exit(runInit())
	}
}

// argv[0] of the re-executed agent binary in its two helper roles.
const (
	monitorArg0    = "minilet-monitor"
	trampolineArg0 = "minilet-exec"
)

// runMonitor supervises one container process: it starts it inside the
// container cgroup, copies its output to the CRI log, waits for it and writes
// the exit record. It outlives the agent (own session).
func runMonitor(dir string) int {
	// fd 3 is the agent's "started" pipe; the container must not inherit it.
	syscall.CloseOnExec(3)
	notify := os.NewFile(3, "started")
	var spec monitorSpec
	if err := readJSON(filepath.Join(dir, fileSpec), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "monitor:", err)
		return 2
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
	oomBefore := oomCounter(spec.MemoryDir, spec.CgroupV2)

	cmd, stdout, stderr, err := startInCgroup(dir, &spec)
	if err != nil {
		return failStart(dir, notify, err)
	}
	if spec.OOMScoreAdj != nil {
		// Fails for negative values without CAP_SYS_RESOURCE; the agent
		// already warned about that, the container runs regardless.
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid), []byte(strconv.FormatInt(*spec.OOMScoreAdj, 10)), 0o644)
	}
	self := os.Getpid()
	ticks, _ := procStartTicks(self)
	if err := writeJSONVolatile(filepath.Join(dir, fileStart), startRecord{
		MonitorPid: self, MonitorTicks: ticks, Pid: cmd.Process.Pid, StartedAt: time.Now().UnixNano(),
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
		killProcsIn(filepath.Join(h.Dir, "cgroup.procs"))
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

	rec := exitRecord{FinishedAt: time.Now().UnixNano(), Reason: reasonCompleted}
	var status syscall.WaitStatus
	if cmd.ProcessState != nil {
		status, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	switch {
	case cmd.ProcessState == nil:
		rec.ExitCode, rec.Reason, rec.Message = 255, reasonError, fmt.Sprintf("wait: %v", waitErr)
	case status.Signaled():
		rec.ExitCode = 128 + int32(status.Signal())
		rec.Reason = reasonError
		rec.Message = "killed by signal " + status.Signal().String()
	default:
		rec.ExitCode = int32(status.ExitStatus())
		if rec.ExitCode != 0 {
			rec.Reason = reasonError
		}
	}
	if after := oomCounter(spec.MemoryDir, spec.CgroupV2); oomBefore >= 0 && after > oomBefore && status.Signaled() && status.Signal() == syscall.SIGKILL {
		rec.ExitCode, rec.Reason, rec.Message = 137, reasonOOMKilled, "the container exceeded its memory limit"
	}
	if err := writeJSONVolatile(filepath.Join(dir, fileExit), rec); err != nil {
		fmt.Fprintln(os.Stderr, "monitor: write exit record:", err)
		return 1
	}
	return 0
}

// startInCgroup starts the container process inside its cgroup. The monitor
// joins the container cgroup, forks (the child inherits the cgroup before it
// execs anything), and moves itself back to where it came from so that its
// own memory is not charged to the container.
func startInCgroup(dir string, spec *monitorSpec) (*exec.Cmd, *os.File, *os.File, error) {
	if len(spec.Args) == 0 {
		return nil, nil, nil, fmt.Errorf("no command")
	}
	var path string
	var initReport, initNotify *os.File
	var err error
	if spec.Rootfs == nil {
		if path, err = lookPath(spec.Args[0], spec.Env); err != nil {
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
	cmd := &exec.Cmd{
		Path: path, Args: spec.Args, Env: spec.Env, Dir: spec.WorkingDir,
		Stdin: devnull, Stdout: outW, Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if spec.Rootfs != nil {
		defer func() { _ = initReport.Close() }()
		cmd.Path, cmd.Args, cmd.Dir = "/proc/self/exe", []string{initArg0}, ""
		cmd.Env = []string{initEnv + "=" + filepath.Join(dir, fileSpec)}
		cmd.ExtraFiles = []*os.File{initNotify}
		cmd.SysProcAttr.Cloneflags = initFlags
	}
	home := ownCgroups(spec.CgroupDirs)
	for _, h := range spec.CgroupDirs {
		if err := os.WriteFile(filepath.Join(h.Dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
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

// ownCgroups maps each hierarchy of dirs to the cgroup.procs file of the
// cgroup this process is in now.
func ownCgroups(dirs []cgroupDir) []string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range dirs {
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			match := h.Controller == "" && parts[0] == "0" && parts[1] == ""
			for _, c := range strings.Split(parts[1], ",") {
				if h.Controller != "" && c == h.Controller {
					match = true
				}
			}
			if match {
				out = append(out, filepath.Join(h.Root, parts[2], "cgroup.procs"))
				break
			}
		}
	}
	return out
}

func returnHome(procs []string) {
	for _, p := range procs {
		_ = os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
}

func killProcsIn(procsFile string) {
	data, err := os.ReadFile(procsFile)
	if err != nil {
		return
	}
	for _, l := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(l); err == nil && p != os.Getpid() {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// lookPath resolves a command like the container would: through the PATH of
// the container's environment.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("executable %q not found: %w", name, err)
		}
		return name, nil
	}
	pathVar := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in $PATH", name)
}

// defaultPath is the PATH containers on the host image get unless their
// config sets one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func failStart(dir string, notify *os.File, cause error) int {
	now := time.Now().UnixNano()
	self := os.Getpid()
	ticks, _ := procStartTicks(self)
	_ = writeJSONVolatile(filepath.Join(dir, fileExit), exitRecord{ExitCode: 128, FinishedAt: now, Reason: reasonStartError, Message: cause.Error()})
	_ = writeJSONVolatile(filepath.Join(dir, fileStart), startRecord{MonitorPid: self, MonitorTicks: ticks, StartedAt: now, Error: cause.Error()})
	_, _ = notify.Write([]byte{0})
	_ = notify.Close()
	return 0
}

// procStartTicks returns the start time of pid (field 22 of /proc/pid/stat)
// and whether the process is alive (not a zombie).
func procStartTicks(pid int) (uint64, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, false
	}
	ticks, _ := strconv.ParseUint(f[19], 10, 64)
	return ticks, f[0] != "Z" && f[0] != "X"
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
			tag := "F"
			content := line
			if line[len(line)-1] == '\n' {
				content = line[:len(line)-1]
			} else if err == bufio.ErrBufferFull {
				tag = "P"
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

// runTrampoline is the exec helper: it joins the container's cgroups (paths
// in argv before "--"), then replaces itself with the command after "--".
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
	for _, procs := range args[:sep] {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fail(fmt.Errorf("join cgroup %s: %w", procs, err))
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, trampolineEnv) {
			env = append(env, kv)
		}
	}
	argv := args[sep+1:]
	if pid := os.Getenv(trampolinePidEnv); pid != "" {
		return execInContainer(pid, os.Getenv(trampolineDirEnv), argv, env, fail)
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		return fail(err)
	}
	return fail(syscall.Exec(path, argv, env))
}
