package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	"github.com/minilet/minilet/internal/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var sandboxSeq atomic.Int64

// testSandbox runs a sandbox with a unique cgroup parent and log dir; the
// sandbox, its containers and the cgroup parent go away with the test.
// testSandbox runs a sandbox with the namespaces the kubelet asks for by
// default: the pod's network and IPC, a PID namespace per container.
func testSandbox(tb testing.TB, r *Runtime) (string, *runtimeapi.PodSandboxConfig) {
	tb.Helper()
	return testSandboxWith(tb, r, &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD})
}

// hostNamespaces are the namespace options of a hostNetwork, hostPID,
// hostIPC pod.
var hostNamespaces = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE}

// testSandboxWith runs a sandbox with the namespace options ns, removed
// when the test ends.
func testSandboxWith(tb testing.TB, r *Runtime, ns *runtimeapi.NamespaceOption) (string, *runtimeapi.PodSandboxConfig) {
	tb.Helper()
	n := sandboxSeq.Add(1)
	name := strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name())
	parent := fmt.Sprintf("/minilet-embedded-test-%s-%d-%d", name, os.Getpid(), n)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "test", Uid: fmt.Sprintf("u%d", n)},
		LogDirectory: tb.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}},
	}
	if ns.GetNetwork() == runtimeapi.NamespaceMode_POD {
		cfg.Hostname = fmt.Sprintf("p%d", n)
	}
	id, err := r.RunPodSandbox(context.Background(), cfg, "")
	if err != nil {
		tb.Fatalf("RunPodSandbox: %v", err)
	}
	tb.Cleanup(func() {
		if err := r.RemovePodSandbox(context.Background(), id); err != nil {
			tb.Errorf("RemovePodSandbox: %v", err)
		}
		removeCgroupDirs(r, parent)
	})
	return id, cfg
}

// removeCgroupDirs removes a test's cgroup parent, empty by now.
func removeCgroupDirs(r *Runtime, parent string) {
	n, _ := cgroups.ParseCgroupfs(parent)
	for _, d := range r.cg.Dirs(n) {
		_ = os.Remove(d.Path)
	}
}

func hostContainer(name string, cmd ...string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "host"},
		Command:  cmd,
		LogPath:  name + ".log",
	}
}

func startContainer(tb testing.TB, r *Runtime, sb string, cfg *runtimeapi.ContainerConfig) string {
	tb.Helper()
	id, err := r.CreateContainer(context.Background(), sb, cfg, nil)
	if err != nil {
		tb.Fatalf("CreateContainer: %v", err)
	}
	if err := r.StartContainer(context.Background(), id); err != nil {
		tb.Fatalf("StartContainer: %v", err)
	}
	return id
}

func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func containerState(tb testing.TB, r *Runtime, id string) *runtimeapi.ContainerStatus {
	tb.Helper()
	resp, err := r.ContainerStatus(context.Background(), id, true)
	if err != nil {
		tb.Fatalf("ContainerStatus: %v", err)
	}
	return resp.GetStatus()
}

func TestConfigAndArgumentErrors(t *testing.T) {
	requireRoot(t)
	if _, err := New(Config{}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "RootDir") {
		t.Errorf("New without RootDir: err = %v, want InvalidArgument naming RootDir", err)
	}
	r := newTestRuntime(t, t.TempDir())
	ctx := context.Background()
	if _, err := r.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "ns", Uid: "u"}}, ""); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "metadata.name") {
		t.Errorf("RunPodSandbox without name: err = %v, want InvalidArgument naming metadata.name", err)
	}
	sb, _ := testSandbox(t, r)
	cfg := hostContainer("c", "true")
	cfg.Image.Image = "docker.io/library/busybox:latest"
	if _, err := r.CreateContainer(ctx, sb, cfg, nil); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "busybox") {
		t.Errorf("CreateContainer with a non-host image: err = %v, want NotFound naming the image", err)
	}
	if _, err := r.CreateContainer(ctx, sb, hostContainer("c"), nil); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "command") {
		t.Errorf("CreateContainer without command: err = %v, want InvalidArgument naming command", err)
	}
	if _, err := r.CreateContainer(ctx, "nope", hostContainer("c", "true"), nil); !errdefs.IsNotFound(err) {
		t.Errorf("CreateContainer in unknown sandbox: err = %v, want NotFound", err)
	}
	for name, err := range map[string]error{
		"StartContainer":  r.StartContainer(ctx, "nope"),
		"StopContainer":   r.StopContainer(ctx, "nope", 0),
		"StopPodSandbox":  r.StopPodSandbox(ctx, "nope"),
		"ReopenContainer": r.ReopenContainerLog(ctx, "nope"),
	} {
		if !errdefs.IsNotFound(err) {
			t.Errorf("%s of unknown id: err = %v, want NotFound", name, err)
		}
	}
}

func TestStartErrorForMissingBinary(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, _ := testSandbox(t, r)
	id, err := r.CreateContainer(context.Background(), sb, hostContainer("c", "/no/such/binary"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(context.Background(), id); err == nil || !strings.Contains(err.Error(), "/no/such/binary") {
		t.Errorf("StartContainer of a missing binary: err = %v, want an error naming it", err)
	}
	st := containerState(t, r, id)
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED || st.GetReason() != monitorproc.ReasonStartError || st.GetExitCode() != 128 {
		t.Errorf("status = %v %q %d, want EXITED StartError 128", st.GetState(), st.GetReason(), st.GetExitCode())
	}
}

func TestChangesSignalStartAndExit(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, _ := testSandbox(t, r)
	drain := func() {
		select {
		case <-r.Changes():
		default:
		}
	}
	expect := func(what string) {
		t.Helper()
		select {
		case <-r.Changes():
		case <-time.After(30 * time.Second):
			t.Fatalf("no change signalled for %s", what)
		}
	}
	drain()
	dir := t.TempDir()
	id := startContainer(t, r, sb, hostContainer("c", "/bin/sh", "-c", "while [ ! -e "+dir+"/go ]; do sleep 0.02; done"))
	expect("start")
	drain()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expect("exit")
	if st := containerState(t, r, id); st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("state after exit signal = %v, want EXITED", st.GetState())
	}
}

func TestExecRunsInContainerCgroup(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, _ := testSandbox(t, r)
	id := startContainer(t, r, sb, hostContainer("c", "sleep", "1000"))
	out, _, err := r.ExecSync(context.Background(), id, []string{"cat", "/proc/self/cgroup"}, 30*time.Second)
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	c, err := r.ctrs.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	want := c.CgroupPath
	for _, ctl := range []string{"memory", "cpu", "pids"} {
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && strings.Contains(","+parts[1]+",", ","+ctl+",") && parts[2] == want {
				found = true
			}
		}
		if !found {
			t.Errorf("exec'd process not in %s cgroup %s:\n%s", ctl, want, out)
		}
	}
	_, _, err = r.ExecSync(context.Background(), id, []string{"sleep", "60"}, 100*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("ExecSync timeout: err = %v (code %v), want context.DeadlineExceeded / codes.DeadlineExceeded", err, status.Code(err))
	}
	if _, _, err := r.ExecSync(context.Background(), id, []string{"no-such-command-xyz"}, 30*time.Second); !errdefs.IsNotFound(err) {
		t.Errorf("ExecSync of a missing command: err = %v, want NotFound", err)
	}
}

func TestContainerStatsFromCgroup(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, sbCfg := testSandbox(t, r)
	script := "import sys, time\nb = bytearray(b'x' * (24 << 20))\nn = 0\nfor i in range(2000000): n += i\nprint('ready', flush=True)\ntime.sleep(1000)\n"
	id := startContainer(t, r, sb, hostContainer("c", "python3", "-c", script))
	logFile := filepath.Join(sbCfg.LogDirectory, "c.log")
	waitUntil(t, "python to allocate", func() bool {
		data, _ := os.ReadFile(logFile)
		return strings.Contains(string(data), " stdout F ready\n")
	})
	s, err := r.ContainerStats(context.Background(), id)
	if err != nil {
		t.Fatalf("ContainerStats: %v", err)
	}
	if ws := s.GetMemory().GetWorkingSetBytes().GetValue(); ws < 20<<20 {
		t.Errorf("working set = %d, want >= 20MiB (the container holds 24MiB)", ws)
	}
	if cpu := s.GetCpu().GetUsageCoreNanoSeconds().GetValue(); cpu == 0 {
		t.Errorf("cpu usage = 0, want > 0 (the container counted to 2e6)")
	}
	list, err := r.ListContainerStats(context.Background(), &runtimeapi.ContainerStatsFilter{PodSandboxId: sb})
	if err != nil || len(list) != 1 || list[0].GetAttributes().GetId() != id {
		t.Errorf("ListContainerStats = %v, %v; want the one container", list, err)
	}
}

func TestRemoveDeletesCgroupAndReapsMonitor(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, _ := testSandbox(t, r)
	id := startContainer(t, r, sb, hostContainer("c", "/bin/sh", "-c", "sleep 1000 & sleep 1000"))
	c, err := r.ctrs.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	start := *c.Start
	n, err := cgroups.ParseCgroupfs(c.CgroupPath)
	if err != nil {
		t.Fatal(err)
	}
	memDir := r.cg.Dir("memory", n)
	if _, err := os.Stat(memDir); err != nil {
		t.Fatalf("container cgroup missing while running: %v", err)
	}
	if err := r.RemoveContainer(context.Background(), id); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := os.Stat(memDir); !os.IsNotExist(err) {
		t.Errorf("container cgroup %s still exists after removal (err %v)", memDir, err)
	}
	// Gone entirely, not a zombie (or its pid already reused).
	waitUntil(t, "the monitor to be reaped", func() bool {
		ticks, _ := monitorproc.ProcStartTicks(start.MonitorPid)
		return ticks != start.MonitorTicks
	})
}

func TestReopenContainerLog(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, sbCfg := testSandbox(t, r)
	dir := t.TempDir()
	id := startContainer(t, r, sb, hostContainer("c", "/bin/sh", "-c",
		"echo one; while [ ! -e "+dir+"/next ]; do sleep 0.02; done; echo two; sleep 1000"))
	logFile := filepath.Join(sbCfg.LogDirectory, "c.log")
	waitUntil(t, "first line", func() bool {
		data, _ := os.ReadFile(logFile)
		return strings.Contains(string(data), " stdout F one\n")
	})
	if err := os.Rename(logFile, logFile+".1"); err != nil {
		t.Fatal(err)
	}
	if err := r.ReopenContainerLog(context.Background(), id); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "next"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "second line in the new file", func() bool {
		data, _ := os.ReadFile(logFile)
		return strings.Contains(string(data), " stdout F two\n")
	})
	if old, _ := os.ReadFile(logFile + ".1"); strings.Contains(string(old), "two") {
		t.Errorf("rotated file got output written after the reopen")
	}
}

func TestCorruptStateIsMovedAside(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	r := newTestRuntime(t, root)
	sb, _ := testSandbox(t, r)
	id := startContainer(t, r, sb, hostContainer("c", "/bin/sh", "-c", "exit 2"))
	waitUntil(t, "exit", func() bool { return containerState(t, r, id).GetState() == runtimeapi.ContainerState_CONTAINER_EXITED })
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(root, "runtime", "sandboxes", "garbage.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCtr := filepath.Join(root, "runtime", "containers", "broken")
	if err := os.MkdirAll(badCtr, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(badCtr, "container.json"), []byte("\x00\x01"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "runtime", "containers", id, monitorproc.FileExit), []byte("[["), 0o600); err != nil {
		t.Fatal(err)
	}

	r2 := newTestRuntime(t, root)
	// The good sandbox and container survive; the rest was moved aside.
	if _, err := r2.PodSandboxStatus(context.Background(), sb, false); err != nil {
		t.Errorf("sandbox lost after reload: %v", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("corrupt sandbox file still in place")
	}
	if m, _ := filepath.Glob(bad + ".corrupt-*"); len(m) != 1 {
		t.Errorf("corrupt sandbox file not kept aside: %v", m)
	}
	if m, _ := filepath.Glob(filepath.Join(badCtr, "container.json"+".corrupt-*")); len(m) != 1 {
		t.Errorf("corrupt container file not kept aside: %v", m)
	}
	// The container whose exit record was lost is reported exited, not running forever.
	waitUntil(t, "exit after lost record", func() bool {
		return containerState(t, r2, id).GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if err := r2.RemovePodSandbox(context.Background(), sb); err != nil {
		t.Errorf("RemovePodSandbox: %v", err)
	}
	_ = os.RemoveAll(badCtr)
}
