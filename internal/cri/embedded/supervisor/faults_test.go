package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

// Fault tests: a container's monitor or state files are lost under a
// running container, or the agent's whole cgroup is killed. Whatever
// happens, the container must never run twice (the supervisor never
// reports exited a container whose process still runs, which would make the
// kubelet start a second copy) and is never lost from the list while it
// runs.

// helperAgentEnv makes the test binary a short-lived agent in its own
// cgroup (see runHelperAgent).
const helperAgentEnv = "MINILET_SUPERVISOR_TEST_AGENT"

// slowSetupEnv, in a container's environment, makes this test binary,
// acting as the exec trampoline, take that long to set up (a loaded
// machine).
const slowSetupEnv = "MINILET_SUPERVISOR_TEST_SLOW_SETUP"

func TestMain(m *testing.M) {
	if d, err := time.ParseDuration(os.Getenv(slowSetupEnv)); err == nil && len(os.Args) > 0 && os.Args[0] == monitorproc.TrampolineArg0 {
		time.Sleep(d)
	}
	monitorproc.MaybeRun()
	if v := os.Getenv(helperAgentEnv); v != "" {
		os.Exit(runHelperAgent(v))
	}
	os.Exit(m.Run())
}

type noLayers struct{}

func (noLayers) LayerPath(string) string { return "" }

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups); CI runs as root")
	}
}

func testDriver(t testing.TB) cgroups.Driver {
	cg, err := cgroups.New(cgroups.Config{Controllers: ContainerControllers})
	if err != nil {
		t.Fatal(err)
	}
	return cg
}

func openSupervisor(t testing.TB, dir string, log *slog.Logger) *Supervisor {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Dir: dir, Logger: log, Cgroups: testDriver(t), Monitor: self, Layers: noLayers{}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// looper is a container record whose process runs until killed and carries
// a marker in its command line, by which its copies are counted.
func looper(parent, marker string) Record {
	id := randomID()
	return Record{
		ID: id, SandboxID: "sb", Name: "c", Image: "host",
		Args:       []string{"/bin/sh", "-c", "while :; do sleep 0.1; done", marker},
		CgroupPath: parent + "/" + id, CreatedAt: time.Now().UnixNano(),
	}
}

// copies counts the running processes whose command line holds marker.
func copies(t testing.TB, marker string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte(marker)) {
			continue
		}
		if _, alive := monitorproc.ProcStartTicks(pid); alive {
			n++
		}
	}
	return n
}

// eventually polls cond every 20ms until it holds or a generous deadline
// passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// faultCase sets up a running container under a supervisor, does the
// fault, and gives the supervisor to check (possibly a new one, "after an
// agent restart").
type faultCase struct {
	name string
	// restart closes the supervisor before the fault and opens a new one
	// after it.
	restart bool
	fault   func(t *testing.T, dir string, c Container)
	// readopted: the original keeps running, re-adopted; otherwise it is
	// killed and its exit recorded with a message naming the loss, or
	// (gone: the container record itself was lost) it is no longer listed.
	readopted, gone bool
	message         string
}

func TestNoDuplicateAfterStateLoss(t *testing.T) {
	requireRoot(t)
	killMonitor := func(t *testing.T, _ string, c Container) {
		if err := syscall.Kill(c.Start.MonitorPid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the monitor to die", func() bool { return !c.Start.Monitor().Alive() })
	}
	remove := func(name string) func(*testing.T, string, Container) {
		return func(t *testing.T, dir string, c Container) {
			if err := os.Remove(filepath.Join(dir, c.ID, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	corrupt := func(name string) func(*testing.T, string, Container) {
		return func(t *testing.T, dir string, c Container) {
			if err := os.WriteFile(filepath.Join(dir, c.ID, name), []byte("{\"pid\": 12, garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []faultCase{
		{name: "monitor killed", fault: killMonitor, message: "monitor"},
		{name: "monitor killed while the agent is down", restart: true, fault: killMonitor, message: "monitor"},
		{name: "start record deleted", restart: true, fault: remove(monitorproc.FileStart), readopted: true},
		{name: "start record corrupt", restart: true, fault: corrupt(monitorproc.FileStart), readopted: true},
		{name: "start record deleted and monitor killed", restart: true, fault: func(t *testing.T, dir string, c Container) {
			remove(monitorproc.FileStart)(t, dir, c)
			killMonitor(t, dir, c)
		}, message: "start record"},
		{name: "container record deleted", restart: true, fault: remove(fileContainer), gone: true},
		{name: "container record corrupt", restart: true, fault: corrupt(fileContainer), gone: true},
	} {
		t.Run(tc.name, func(t *testing.T) { runFault(t, tc) })
	}
}

func runFault(t *testing.T, tc faultCase) {
	log := testLog(t)
	dir := t.TempDir()
	parent := "/minilet-test-faults-" + randomID()[:8]
	cg := testDriver(t)
	t.Cleanup(func() { _ = cg.Destroy(context.Background(), cgroups.Name{parent[1:]}) })
	marker := "marker-" + randomID()
	s := openSupervisor(t, dir, log)
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	rec := looper(parent, marker)
	if err := s.Create(rec); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(rec.ID); err != nil {
		t.Fatal(err)
	}
	c, _ := s.Get(rec.ID)
	if c.Start.Ticks == 0 || c.Start.BootID == "" {
		t.Errorf("start record %+v does not identify the container process (start time, boot ID)", c.Start)
	}
	if tc.restart {
		s.Close()
		closed = true
	}
	tc.fault(t, dir, c)
	if tc.restart {
		s = openSupervisor(t, dir, log)
		closed = false
	}
	t.Cleanup(func() { _ = s.Remove(context.Background(), rec.ID) })

	switch {
	case tc.gone:
		if _, err := s.Get(rec.ID); err == nil {
			t.Fatal("a container whose record was lost is still listed")
		}
		eventually(t, "the unlisted original to be killed", func() bool { return copies(t, marker) == 0 })
	case tc.readopted:
		got, err := s.Get(rec.ID)
		if err != nil {
			t.Fatalf("container lost: %v", err)
		}
		if got.State() != Running || got.Start.Pid != c.Start.Pid {
			t.Fatalf("container %v (pid %d), want re-adopted Running with pid %d", got.State(), got.Start.Pid, c.Start.Pid)
		}
		if !strings.Contains(got.StateLost, "re-adopted") {
			t.Errorf("re-adopted container's StateLost = %q, want what was lost and done", got.StateLost)
		}
		if n := copies(t, marker); n != 1 {
			t.Fatalf("%d copies of the container run, want the original alone", n)
		}
		// Re-adopted for real: stopping it works and ends it.
		if err := s.Stop(context.Background(), rec.ID, 1); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the stopped container to be gone", func() bool { return copies(t, marker) == 0 })
	default:
		eventually(t, "the container's exit to be recorded", func() bool {
			got, err := s.Get(rec.ID)
			return err == nil && got.State() == Exited
		})
		got, _ := s.Get(rec.ID)
		// Reported exited (the kubelet will start a new one) only once the
		// original is gone: never two.
		if n := copies(t, marker); n != 0 {
			t.Fatalf("the container is reported exited while %d copies of it still run", n)
		}
		if got.Exit.Reason != monitorproc.ReasonStateLost {
			t.Errorf("exit reason %q, want %q", got.Exit.Reason, monitorproc.ReasonStateLost)
		}
		if !strings.Contains(got.Exit.Message, tc.message) || !strings.Contains(got.Exit.Message, "killed") {
			t.Errorf("exit message %q does not name what was lost (%s) and what was done", got.Exit.Message, tc.message)
		}
	}
}

// TestStopLeavesAReusedPidAlone: a start record whose PID now names another
// process (the container ended unrecorded, the PID was handed out again)
// must not make Stop or Remove kill that process.
func TestStopLeavesAReusedPidAlone(t *testing.T) {
	requireRoot(t)
	log := testLog(t)
	dir := t.TempDir()
	parent := "/minilet-test-faults-" + randomID()[:8]
	cg := testDriver(t)
	t.Cleanup(func() { _ = cg.Destroy(context.Background(), cgroups.Name{parent[1:]}) })
	s := openSupervisor(t, dir, log)
	rec := looper(parent, "marker-"+randomID())
	if err := s.Create(rec); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(rec.ID); err != nil {
		t.Fatal(err)
	}
	c, _ := s.Get(rec.ID)
	s.Close()
	// The container and its monitor end without a trace...
	_ = syscall.Kill(c.Start.MonitorPid, syscall.SIGKILL)
	_ = cg.Kill(cgroups.Name{parent[1:], rec.ID})
	eventually(t, "the container to end", func() bool { return !c.Start.Container().Alive() })
	// ...and its PID now names an unrelated process, one started at
	// another clock tick (start times have a 10 ms resolution: a real PID
	// reuse, which needs the PID space to wrap, is always later than that).
	var victim *exec.Cmd
	for {
		victim = exec.Command("sleep", "600")
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		if ticks, _ := monitorproc.ProcStartTicks(victim.Process.Pid); ticks != c.Start.Ticks {
			break
		}
		_ = victim.Process.Kill()
		_ = victim.Wait()
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	st := *c.Start
	st.Pid = victim.Process.Pid // the start time stays the container's
	if err := statefile.Write(filepath.Join(dir, rec.ID, monitorproc.FileStart), st); err != nil {
		t.Fatal(err)
	}
	s = openSupervisor(t, dir, log)
	defer s.Close()
	if err := s.Stop(context.Background(), rec.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, alive := monitorproc.ProcStartTicks(victim.Process.Pid); !alive {
		t.Fatal("stopping and removing the container killed an unrelated process that reused its PID")
	}
}

// runHelperAgent is an agent that runs in the cgroup named by its
// argument: it starts a container, prints its ID and start record, and
// waits to be killed.
func runHelperAgent(arg string) int {
	dir, parent, agentCgroup, marker := splitArgs(arg)
	cg, err := cgroups.New(cgroups.Config{Controllers: ContainerControllers})
	if err == nil {
		err = cg.Join(cgroups.Name{agentCgroup}, os.Getpid())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	self, _ := os.Executable()
	// Monitors leave the agent's cgroup for one below the cgroup root, as
	// the agent configures them.
	s, err := Open(Config{Dir: dir, Cgroups: cg, Monitor: self, Layers: noLayers{},
		MonitorCgroup: cgroups.Name{strings.TrimPrefix(parent, "/"), MonitorCgroupName}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rec := looper(parent, marker)
	if err = s.Create(rec); err == nil {
		err = s.Start(rec.ID)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(rec.ID)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func splitArgs(arg string) (string, string, string, string) {
	f := strings.Split(arg, "|")
	for len(f) < 4 {
		f = append(f, "")
	}
	return f[0], f[1], f[2], f[3]
}

// TestAgentCgroupKilled: a service manager ending the agent's cgroup (every
// process in it SIGKILLed) leaves the containers running, and the next
// agent re-adopts them.
func TestAgentCgroupKilled(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	suffix := randomID()[:8]
	parent, agentCgroup := "/minilet-test-faults-"+suffix, "minilet-test-agent-"+suffix
	cg := testDriver(t)
	if err := cg.Create(cgroups.Name{agentCgroup}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cg.Destroy(context.Background(), cgroups.Name{parent[1:]})
		_ = cg.Destroy(context.Background(), cgroups.Name{agentCgroup})
		// The monitors' cgroup in the hierarchies the driver does not manage.
		for _, h := range extraHierarchies {
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", h.dir, parent, MonitorCgroupName))
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", h.dir, parent))
		}
	})
	marker := "marker-" + suffix
	self, _ := os.Executable()
	agent := exec.Command(self)
	agent.Env = append(os.Environ(), helperAgentEnv+"="+strings.Join([]string{dir, parent, agentCgroup, marker}, "|"))
	stdin, _ := agent.StdinPipe()
	defer func() { _ = stdin.Close() }()
	out, _ := agent.StdoutPipe()
	agent.Stderr = os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = agent.Wait()
		t.Fatalf("helper agent: %v", err)
	}
	id := strings.TrimSpace(line)
	// The service manager: every process of the agent's cgroup killed.
	if err := cg.Kill(cgroups.Name{agentCgroup}); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	if ps, _ := cg.Pids(cgroups.Name{agentCgroup}); len(ps) != 0 {
		t.Fatalf("processes %v still in the agent's cgroup", ps)
	}
	if n := copies(t, marker); n != 1 {
		t.Fatalf("%d copies of the container run after the agent's cgroup was killed, want 1", n)
	}
	s := openSupervisor(t, dir, testLog(t))
	defer s.Close()
	c, err := s.Get(id)
	if err != nil || c.State() != Running || !c.Start.Monitor().Alive() {
		t.Fatalf("container after the agent's cgroup was killed: %+v, %v; want running, its monitor alive", c, err)
	}
	if err := s.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if n := copies(t, marker); n != 0 {
		t.Fatalf("%d copies still run after removal", n)
	}
}
