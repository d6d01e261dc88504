// Package harness runs the real minilet binary for end-to-end tests: it
// builds the binary once, starts agents with their own root dir, manifest
// dir, cgroup root and free port, and reads their HTTP API.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/cri/embedded/podnet/podnettest"
	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/internal/pki"
)

// Deadline is how long a test waits for a condition. It is generous on
// purpose: CI machines are small and run packages in parallel.
const Deadline = 60 * time.Second

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds ./cmd/minilet, and ./cmd/minilet-monitor and
// ./cmd/minilet-exec next to it, once per test process and returns the
// agent's path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := makeBinDir()
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "minilet")
		// The agent starts container monitors from the small
		// minilet-monitor binary next to it, and execs through
		// minilet-exec.
		for _, b := range []struct {
			out  string
			args []string
		}{
			{binPath, []string{"go", "build", "-buildvcs=auto", "-o", binPath, "./cmd/minilet"}},
			{"minilet-monitor", []string{"go", "build", "-o", filepath.Join(dir, "minilet-monitor"), "./cmd/minilet-monitor"}},
			{"minilet-exec", []string{"./scripts/build-exec-helper.sh", filepath.Join(dir, "minilet-exec")}},
		} {
			cmd := exec.Command(b.args[0], b.args[1:]...)
			cmd.Dir = repoRoot()
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("build %s: %w\n%s", b.out, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RepoRoot is the repository's root directory (found from this file's
// path, whatever the test's working directory).
func RepoRoot() string { return repoRoot() }

// LogLines copies r to t's log line by line as it comes (a long build
// should say what it waits on) and returns a function giving the last ten
// lines, for an error message. It returns once r is exhausted.
func LogLines(t testing.TB, r io.Reader) func() string {
	var last []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		t.Log(sc.Text())
		last = append(last, sc.Text())
		if len(last) > 10 {
			last = last[1:]
		}
	}
	return func() string { return strings.Join(last, " | ") }
}

// RunScript runs a script of the repository (a path relative to its root)
// that prints its result as the last line of its standard output, with its
// standard error going to t's log line by line (a long build says what it
// waits on), and returns that line.
func RunScript(t testing.TB, script string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot(), script))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting %s: %w", script, err)
	}
	tail := LogLines(t, stderr)
	if err := cmd.Wait(); err != nil {
		return "", fmt.Errorf("%s: %w; last output: %s", script, err, tail())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Agent is one running minilet.
type Agent struct {
	t           testing.TB
	RootDir     string
	ManifestDir string
	CgroupRoot  string
	PluginDir   string
	CNIConfDir  string
	NodeName    string
	ExtraArgs   []string
	PluginArgs  []string // extra flags for StartPlugin's example plugin
	Addr        string   // https://host:port once started
	// HTTP calls the agent's API as its local admin (client certificate
	// and pinned serving certificate from RootDir/pki).
	HTTP *http.Client

	cmd  *exec.Cmd
	logs *bytes.Buffer
	mu   sync.Mutex
	done chan struct{}
}

// New prepares an agent with fresh directories; Start runs it. Cleanup
// stops the agent and kills every pod it left behind.
func New(t testing.TB) *Agent {
	t.Helper()
	base, err := os.MkdirTemp("", "mlt")
	if err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("e2e-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	a := &Agent{
		t:           t,
		RootDir:     filepath.Join(base, "root"),
		ManifestDir: filepath.Join(base, "manifests"),
		PluginDir:   filepath.Join(base, "dp"),
		CNIConfDir:  filepath.Join(base, "cni"),
		CgroupRoot:  "/minilet-" + marker,
		NodeName:    "node-" + fmt.Sprint(os.Getpid()%10000),
	}
	for _, d := range []string{a.RootDir, a.ManifestDir, a.PluginDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", a.Logs())
		}
		a.killPods()
		a.releaseNetworks()
		// The test's cgroup root is gone: so is any use of its lock.
		_ = os.Remove(cm.LockFile(cm.DefaultLockDir, a.CgroupRoot))
		unmountUnder(base) // tmpfs of secret and projected volumes
		_ = os.RemoveAll(base)
	})
	return a
}

// unmountUnder detaches every mount below dir, deepest first, so that
// removing dir cannot fail on a busy mount point or reach into a mount.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// Start runs the agent and waits until its API answers.
func (a *Agent) Start() {
	a.t.Helper()
	bin := Binary(a.t)
	_ = os.Remove(filepath.Join(a.RootDir, "minilet.addr"))
	args := []string{"run",
		"--root-dir", a.RootDir,
		"--pod-manifest-path", a.ManifestDir,
		"--port", "0",
		"--read-only-port", "0",
		"--cgroup-root", a.CgroupRoot,
		"--device-plugin-dir", a.PluginDir,
		"--hostname-override", a.NodeName,
		"--log-level", "debug",
		// Pods off the host network are attached with the reference CNI
		// plugins; each agent writes the default network into its own
		// conf dir (the IP pool behind it is host-wide).
		"--cni-bin-dir", podnettest.BinDir(a.t),
		"--cni-conf-dir", a.CNIConfDir,
	}
	args = append(args, a.ExtraArgs...)
	// A restarted agent's log follows the previous run's (whose output a
	// killed agent's copier may still be writing).
	a.mu.Lock()
	if a.logs == nil {
		a.logs = &bytes.Buffer{}
	}
	a.mu.Unlock()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = &lockedWriter{a: a}
	cmd.Stderr = &lockedWriter{a: a}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.cmd = cmd
	done := make(chan struct{}) // this run's, not a later Start's
	a.done = done
	go func() { _ = cmd.Wait(); close(done) }()
	a.Eventually("the agent's API answers", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(a.RootDir, "minilet.addr"))
		if err != nil {
			select {
			case <-a.done:
				a.t.Fatalf("agent exited early:\n%s", a.Logs())
			default:
			}
			return false, err.Error()
		}
		a.Addr = "https://" + strings.TrimSpace(string(b))
		tc, err := pki.ClientTLS(pki.Dir(a.RootDir))
		if err != nil {
			return false, err.Error()
		}
		a.HTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := a.HTTP.Get(a.Addr + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
}

type lockedWriter struct{ a *Agent }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	return w.a.logs.Write(p)
}

// Logs returns what the agent printed so far.
func (a *Agent) Logs() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.logs == nil {
		return ""
	}
	return a.logs.String()
}

// Stop ends the agent (SIGTERM, then SIGKILL after 20 s). Pods keep
// running: agent shutdown is not pod death.
func (a *Agent) Stop() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
	a.cmd = nil
}

// killPods kills every process left in the agent's cgroup root and removes
// the cgroups, so tests do not leak pods into each other.
func (a *Agent) killPods() {
	for _, ctrl := range []string{"memory", "cpu", "cpuacct", "pids", "cpuset", "blkio", "devices", "freezer", "hugetlb", "net_cls", "perf_event", "systemd", "unified"} {
		root := filepath.Join("/sys/fs/cgroup", ctrl, a.CgroupRoot)
		if _, err := os.Stat(root); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			killProcs(dirs[i])
			for j := 0; j < 50; j++ {
				if err := os.Remove(dirs[i]); err == nil || os.IsNotExist(err) {
					break
				}
				killProcs(dirs[i])
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	// Monitors live outside pod cgroups; they carry the root dir in their
	// environment. Kill those that belong to this agent.
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid := 0
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid <= 1 {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte(a.RootDir)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(a.RootDir)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// releaseNetworks detaches the pods the agent left behind from the CNI
// network, as their deletion would have: killed processes release no IP,
// and a host port's DNAT rule left behind would capture a later test's
// listener on that port. It opens the agent's embedded runtime state
// in-process and removes every sandbox (a no-op for containerd agents).
func (a *Agent) releaseNetworks() {
	if _, err := os.Stat(filepath.Join(a.RootDir, "runtime", "sandboxes")); err != nil {
		return
	}
	rt, err := embedded.New(embedded.Config{RootDir: a.RootDir, CNIConfDir: a.CNIConfDir, CNIBinDirs: []string{podnettest.BinDir(a.t)},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		a.t.Logf("release the pods' networks: %v", err)
		return
	}
	defer func() { _ = rt.Close(context.Background()) }()
	ctx := context.Background()
	sandboxes, _ := rt.ListPodSandbox(ctx, nil)
	for _, sb := range sandboxes {
		_ = rt.StopPodSandbox(ctx, sb.GetId())
		if err := rt.RemovePodSandbox(ctx, sb.GetId()); err != nil {
			a.t.Logf("release the network of pod %s/%s: %v", sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), err)
		}
	}
}

func killProcs(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		pid := 0
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// WriteManifest writes a manifest file into the agent's manifest dir.
func (a *Agent) WriteManifest(name, content string) {
	a.t.Helper()
	tmp := filepath.Join(a.ManifestDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		a.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(a.ManifestDir, name)); err != nil {
		a.t.Fatal(err)
	}
}

// RemoveManifest deletes a manifest file.
func (a *Agent) RemoveManifest(name string) {
	a.t.Helper()
	if err := os.Remove(filepath.Join(a.ManifestDir, name)); err != nil {
		a.t.Fatal(err)
	}
}

// Get fetches path from the agent's API and decodes JSON into out.
func (a *Agent) Get(path string, out any) error {
	if a.HTTP == nil {
		return fmt.Errorf("GET %s: the agent is not started", path)
	}
	resp, err := a.HTTP.Get(a.Addr + path)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	if s, ok := out.(*string); ok {
		*s = string(body)
		return nil
	}
	return json.Unmarshal(body, out)
}

// Pods returns the agent's pods.
func (a *Agent) Pods() []v1.Pod {
	var list v1.PodList
	if err := a.Get("/pods", &list); err != nil {
		a.t.Logf("GET /pods: %v", err)
		return nil
	}
	return list.Items
}

// Pod returns the pod with the given name (as listed, e.g. NAME-NODENAME).
func (a *Agent) Pod(name string) (v1.Pod, bool) {
	for _, p := range a.Pods() {
		if p.Name == name {
			return p, true
		}
	}
	return v1.Pod{}, false
}

// Static is the name the agent gives the static pod NAME.
func (a *Agent) Static(name string) string { return name + "-" + a.NodeName }

// Events returns the events recorded for a pod (NS/NAME), or all.
func (a *Agent) Events(nsName string) []v1.Event {
	var list v1.EventList
	path := "/events"
	if nsName != "" {
		path += "?pod=" + nsName
	}
	if err := a.Get(path, &list); err != nil {
		a.t.Logf("GET %s: %v", path, err)
		return nil
	}
	return list.Items
}

// Eventually polls cond until it is true or Deadline passes; cond returns a
// description of what it saw for the failure message.
func (a *Agent) Eventually(what string, cond func() (bool, string)) {
	a.t.Helper()
	Eventually(a.t, what, cond)
}

// Eventually polls cond every 50 ms until it holds or Deadline passes.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	EventuallyWithin(t, Deadline, what, cond)
}

// EventuallyWithin is Eventually with its own deadline, for waits that
// are long by nature (a certificate's lifetime, a soak).
func EventuallyWithin(t testing.TB, deadline time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Output collects a background command's output; it may be read while
// the command still writes.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// CLI runs `minilet ARGS --root-dir ROOT`, as a user on this machine
// would (the CLI finds the agent's address and credentials there), and
// returns its output.
func (a *Agent) CLI(args ...string) (string, error) {
	out, err := a.CLICommand(args...).CombinedOutput()
	return string(out), err
}

// CLICommand is the command CLI runs, to wire its streams or run it in
// the background.
func (a *Agent) CLICommand(args ...string) *exec.Cmd {
	return exec.Command(Binary(a.t), append([]string{"--root-dir", a.RootDir}, args...)...)
}

var (
	pluginOnce sync.Once
	pluginPath string
	pluginErr  error
)

// PluginBinary builds ./cmd/example-device-plugin once and returns its path.
func PluginBinary(t testing.TB) string {
	t.Helper()
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "minilet-plugin")
		if err != nil {
			pluginErr = err
			return
		}
		pluginPath = filepath.Join(dir, "example-device-plugin")
		cmd := exec.Command("go", "build", "-o", pluginPath, "./cmd/example-device-plugin")
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			pluginErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginPath
}

// StartPlugin runs the example device plugin against the agent's plugin
// dir, advertising the given device IDs for resource; it is stopped at
// cleanup. Extra flags (e.g. --register-delay) go in PluginArgs.
func (a *Agent) StartPlugin(resource string, ids ...string) *Plugin {
	a.t.Helper()
	p := &Plugin{a: a, args: append([]string{"--resource", resource, "--devices", strings.Join(ids, ","), "--plugin-dir", a.PluginDir}, a.PluginArgs...)}
	p.start()
	a.t.Cleanup(p.Stop)
	return p
}

// Plugin is a running example device plugin.
type Plugin struct {
	a    *Agent
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *Plugin) start() {
	cmd := exec.Command(PluginBinary(p.a.t), p.args...)
	cmd.Stdout, cmd.Stderr = &lockedWriter{a: p.a}, &lockedWriter{a: p.a}
	if err := cmd.Start(); err != nil {
		p.a.t.Fatal(err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	go func() { _ = cmd.Wait(); close(done) }()
}

// Stop kills the plugin. Idempotent.
func (p *Plugin) Stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// Restart kills the plugin and starts it again with the same flags.
func (p *Plugin) Restart() {
	p.Stop()
	p.start()
}

// Kill ends the agent with SIGKILL: nothing of its shutdown runs.
func (a *Agent) Kill() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	a.cmd = nil
}

// Node returns the agent's node object.
func (a *Agent) Node() v1.Node {
	var n v1.Node
	if err := a.Get("/node", &n); err != nil {
		a.t.Logf("GET /node: %v", err)
	}
	return n
}

// ContainerdEnv names the environment variable holding the CRI endpoint of
// the shared test containerd (scripts/containerd-up.sh prints it; `make
// test` exports it).
const ContainerdEnv = "MINILET_CONTAINERD_ENDPOINT"

// BusyboxImage is an image scripts/containerd-up.sh builds into the test
// containerd: Debian's busybox-static with its applet links (sh, httpd,
// nc, wget, ...); no python3. (Its python variant is used only by
// internal/cri/remote's conformance test, which names it there.)
const BusyboxImage = "minilet.test/busybox:latest"

// ContainerdEndpoint returns the test containerd's CRI endpoint, or skips
// t when none is configured.
func ContainerdEndpoint(t testing.TB) string {
	t.Helper()
	ep := os.Getenv(ContainerdEnv)
	if ep == "" {
		t.Skip(ContainerdEnv + " is not set: run scripts/containerd-up.sh and export the unix:// endpoint it prints (make test does both)")
	}
	return ep
}

// UseContainerd makes the agent run its pods on the test containerd (it
// skips t without one). When the test ends, the agent is stopped and every
// sandbox it made is removed from containerd, which is shared with other
// tests.
func (a *Agent) UseContainerd() {
	a.t.Helper()
	ep := ContainerdEndpoint(a.t)
	a.ExtraArgs = append(a.ExtraArgs, "--container-runtime-endpoint", ep)
	a.t.Cleanup(func() {
		a.Stop()
		removeSandboxes(a.t, ep, a.RootDir)
	})
}

// removeSandboxes removes the sandboxes whose log directory is under
// rootDir, i.e. those one agent made.
func removeSandboxes(t testing.TB, endpoint, rootDir string) {
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	defer cancel()
	rt, err := remote.New(ctx, remote.Config{Endpoint: endpoint, RequestTimeout: Deadline})
	if err != nil {
		t.Errorf("cleanup: connecting to %s: %v", endpoint, err)
		return
	}
	defer rt.Close(ctx) //nolint:errcheck // best-effort cleanup
	list, err := rt.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Errorf("cleanup: listing sandboxes: %v", err)
		return
	}
	for _, sb := range list {
		st, err := rt.PodSandboxStatus(ctx, sb.GetId(), true)
		if err != nil {
			continue
		}
		var info struct {
			Config struct {
				LogDirectory string `json:"log_directory"`
			} `json:"config"`
		}
		if json.Unmarshal([]byte(st.GetInfo()["info"]), &info) != nil ||
			!strings.HasPrefix(info.Config.LogDirectory, rootDir+string(filepath.Separator)) {
			continue
		}
		_ = rt.StopPodSandbox(ctx, sb.GetId())
		if err := rt.RemovePodSandbox(ctx, sb.GetId()); err != nil {
			t.Errorf("cleanup: removing sandbox %s: %v", sb.GetId(), err)
		}
	}
}
