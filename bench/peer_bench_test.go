package bench

// Exec probes side by side with the upstream kubelet (issue 19): the same
// workload through three agents, one after the other on the same machine:
//   - minilet-embedded: minilet on its embedded runtime (image "host");
//   - minilet-containerd: minilet on a private containerd;
//   - kubelet-containerd: the upstream kubelet, of the control plane's
//     version (k8s.io/kubernetes in hack/cluster, built on demand by
//     clusterbin.EnsureKubelet: minutes when cold, cached after), on the
//     same private containerd.
// The private containerd is scripts/containerd-up.sh with a state
// directory of this benchmark's own (a kubelet kills every pod of its
// runtime it does not know, so it must not share the tests' containerd);
// scripts/containerd-down.sh removes it at the end.
//
// Workload: 30 static pods (host network, `sleep`, BestEffort), each with
// an exec liveness probe ["/bin/sh","-c","true"], timeoutSeconds 1,
// periodSeconds 1, failureThreshold 1, renamed into the manifest directory
// all at once. Once all are running, a window of MINILET_PEER_SECONDS
// (default 60) quiet, then with MINILET_PEER_LOAD=1 a second window
// (MINILET_PEER_LOAD_SECONDS, default the same length; the check
// is 600) with 2 busy loops (`while :; do :; done`, separate processes, not counted)
// per core.
//
// Per window and agent:
//   - restarts: the sum of restartCount in the agent's GET /pods (since
//     the pods were written; any restart here is a false one, `true`
//     never fails);
//   - probes: the rise of prober_probe_total{probe_type="Liveness"} in
//     the agent's /metrics/probes;
//   - cpu-ms/probe (and agent-cpu-ms/probe, the agent's part, without
//     containerd and its shims): the rise, over the window, of utime+stime+cutime+cstime
//     (/proc/PID/stat) summed over the agent's processes, divided by probes.
//     The processes are the agent and its descendants, plus for minilet-
//     embedded its container monitors (and their descendants), plus for
//     containerd the containerd daemon and its shims (`containerd-shim*
//     -address SOCK`) and their descendants. The children's fields take in
//     every exited process the counted ones reaped: exec helpers, runc
//     exec, and the probe's own sh (run by runc, reaped by the shim; on
//     the embedded runtime by the monitor helper the agent waits for). So
//     each figure is the whole cost of a probe on that stack, the probed
//     command included; the idle sleeps add nothing.
//
// The kubelet runs standalone (no API server, no kubeconfig) as root on
// cgroup v1 without systemd. What it needed to start here, and to leave
// the host as it was (see peerKubeletConfig and startPeerKubelet):
// --config (staticPodPath, containerRuntimeEndpoint, cgroupDriver
// cgroupfs, cgroupsPerQOS with a cgroupRoot of its own that must exist
// beforehand, failCgroupV1 false (1.35+ refuses cgroup v1 otherwise),
// failSwapOn false, anonymous authentication with AlwaysAllow,
// readOnlyPort/port on free loopback ports, healthzPort 0,
// podLogsDir in its directory, makeIPTablesUtilChains false (else
// it adds KUBE-FIREWALL to the host's INPUT/OUTPUT), image GC thresholds
// 100/99 and tiny hard-eviction thresholds (nothing of the shared disk's
// state can evict or delete anything), protectKernelDefaults true),
// --root-dir, --cert-dir, --hostname-override. It runs in a private mount
// namespace (unshare -m) with tmpfs over /var/lib and /var/log (its device
// plugin socket and /var/log/containers have fixed paths there), and with
// the six kernel tunables it insists on (vm.overcommit_memory,
// vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
// kernel.keys.root_maxkeys/root_maxbytes) shown to it as files holding its
// values, bound over /proc/sys: it would otherwise rewrite them host-wide.
//
// Run: go test ./bench -run '^$' -bench PeerExecProbes -benchtime 1x -timeout 30m

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/test/harness"
)

const (
	peerPods       = 30
	peerClockTicks = 100 // USER_HZ of /proc/PID/stat
)

// peerAgent is one agent under test, seen from outside.
type peerAgent struct {
	name         string
	manifestDir  string
	nodeName     string
	get          func(path string) (string, error) // GET on its API
	agentProcs   func() []int                      // the roots of the agent's processes
	runtimeProcs func() []int                      // the roots of a separate runtime's (nil: none)
}

func BenchmarkPeerExecProbes(b *testing.B) {
	requireRootB(b)
	window := 60 * time.Second
	if v, err := strconv.Atoi(os.Getenv("MINILET_PEER_SECONDS")); err == nil && v > 0 {
		window = time.Duration(v) * time.Second
	}
	load := os.Getenv("MINILET_PEER_LOAD") == "1"
	loadWindow := window
	if v, err := strconv.Atoi(os.Getenv("MINILET_PEER_LOAD_SECONDS")); err == nil && v > 0 {
		loadWindow = time.Duration(v) * time.Second
	}
	windows := peerWindows{quiet: window}
	if load {
		windows.load = loadWindow
	}

	b.Run("minilet-embedded", func(b *testing.B) {
		a := harness.New(b)
		a.Start()
		peerRun(b, peerMinilet(a, nil), "host", windows)
	})

	if _, err := exec.LookPath("containerd"); err != nil {
		b.Skip("no containerd on this machine: the containerd runs are skipped")
	}
	cgroupRoot := fmt.Sprintf("/minilet-peer-kubelet-%d", os.Getpid())
	b.Cleanup(func() { harness.RemoveCgroupRoot(cgroupRoot) }) // after containerd is down
	ep, sock, cdPid := peerContainerd(b)
	b.Run("minilet-containerd", func(b *testing.B) {
		a := harness.New(b)
		b.Cleanup(func() { peerClearContainerd(b, ep) }) // after the agent stopped
		a.ExtraArgs = append(a.ExtraArgs, "--container-runtime-endpoint", ep)
		a.Start()
		peerRun(b, peerMinilet(a, func() []int { return append([]int{cdPid}, peerShims(sock)...) }), harness.BusyboxImage, windows)
	})
	b.Run("kubelet-containerd", func(b *testing.B) {
		set, err := clusterbin.EnsureKubelet(b.Logf)
		if err != nil {
			b.Skipf("cannot build the upstream kubelet: %v", err)
		}
		k := startPeerKubelet(b, set.Path(clusterbin.Kubelet), ep, cgroupRoot)
		k.runtimeProcs = func() []int { return append([]int{cdPid}, peerShims(sock)...) }
		peerRun(b, k, harness.BusyboxImage, windows)
	})
}

func peerMinilet(a *harness.Agent, runtimeProcs func() []int) peerAgent {
	return peerAgent{
		name: "minilet", manifestDir: a.ManifestDir, nodeName: a.NodeName,
		get: func(path string) (string, error) {
			var s string
			err := a.Get(path, &s)
			return s, err
		},
		agentProcs: func() []int {
			var out []int
			if pid, ok := agentPid(a.RootDir); ok {
				out = append(out, pid)
			}
			return append(out, monitorPids(a.RootDir)...)
		},
		runtimeProcs: runtimeProcs,
	}
}

// peerManifest is pod i of the workload.
func peerManifest(i int, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: peer%02d, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sleep", "100000"]
    livenessProbe:
      exec: {command: ["/bin/sh", "-c", "true"]}
      timeoutSeconds: 1
      periodSeconds: 1
      failureThreshold: 1
`, i, image)
}

// peerSample is what one look at an agent sees.
type peerSample struct {
	at       time.Time
	restarts int
	probes   float64
	agentCPU uint64 // clock ticks
	cpu      uint64 // clock ticks, the runtime's included
}

// peerWindows are the measurement windows: quiet, then under load (none
// when zero).
type peerWindows struct{ quiet, load time.Duration }

func peerRun(b *testing.B, ag peerAgent, image string, windows peerWindows) {
	// Write every manifest aside, then rename them in at once.
	stage := b.TempDir()
	for i := range peerPods {
		if err := os.WriteFile(filepath.Join(stage, fmt.Sprintf("peer%02d.yaml", i)), []byte(peerManifest(i, image)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	for i := range peerPods {
		name := fmt.Sprintf("peer%02d.yaml", i)
		if err := os.Rename(filepath.Join(stage, name), filepath.Join(ag.manifestDir, name)); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { peerRemovePods(b, ag) })
	harness.EventuallyWithin(b, 5*time.Minute, fmt.Sprintf("%d pods running", peerPods), func() (bool, string) {
		pods, err := peerPodList(ag)
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods {
			if p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
				running++
			}
		}
		return running == peerPods, fmt.Sprintf("%d of %d running", running, peerPods)
	})
	b.ReportMetric(time.Since(start).Seconds(), "all-running-s")

	measure := func(phase string, window time.Duration) {
		s0 := peerLook(b, ag)
		time.Sleep(window) // the measurement window itself, not a wait for a condition
		s1 := peerLook(b, ag)
		probes := s1.probes - s0.probes
		cpuMs := float64(s1.cpu-s0.cpu) * 1000 / peerClockTicks
		agentMs := float64(s1.agentCPU-s0.agentCPU) * 1000 / peerClockTicks
		perProbe, agentPerProbe := 0.0, 0.0
		if probes > 0 {
			perProbe, agentPerProbe = cpuMs/probes, agentMs/probes
		}
		b.ReportMetric(float64(s1.restarts), phase+"-restarts")
		b.ReportMetric(probes, phase+"-probes")
		b.ReportMetric(perProbe, phase+"-cpu-ms/probe")
		b.ReportMetric(agentPerProbe, phase+"-agent-cpu-ms/probe")
		b.Logf("%s %s: %d restarts since start (%d in the window), %.0f probes in %s (%.1f/s for %d pods), %.0f ms CPU (agent %.0f), %.2f ms CPU/probe (agent %.2f)",
			b.Name(), phase, s1.restarts, s1.restarts-s0.restarts, probes, s1.at.Sub(s0.at).Round(time.Second),
			probes/s1.at.Sub(s0.at).Seconds(), peerPods, cpuMs, agentMs, perProbe, agentPerProbe)
	}
	measure("quiet", windows.quiet)
	if windows.load > 0 {
		stop := peerBusyLoops(b, 2*runtime.NumCPU())
		measure("load", windows.load)
		stop()
	}
}

func peerPodList(ag peerAgent) ([]v1.Pod, error) {
	body, err := ag.get("/pods")
	if err != nil {
		return nil, err
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		return nil, fmt.Errorf("GET /pods: %w", err)
	}
	var out []v1.Pod
	for _, p := range list.Items {
		if strings.HasPrefix(p.Name, "peer") {
			out = append(out, p)
		}
	}
	return out, nil
}

func peerLook(b *testing.B, ag peerAgent) peerSample {
	b.Helper()
	s := peerSample{at: time.Now(), agentCPU: peerTreeCPU(ag.agentProcs())}
	s.cpu = s.agentCPU
	if ag.runtimeProcs != nil {
		s.cpu += peerTreeCPU(ag.runtimeProcs())
	}
	pods, err := peerPodList(ag)
	if err != nil {
		b.Fatal(err)
	}
	if len(pods) != peerPods {
		b.Fatalf("%d pods listed, want %d", len(pods), peerPods)
	}
	for _, p := range pods {
		for _, c := range p.Status.ContainerStatuses {
			s.restarts += int(c.RestartCount)
		}
	}
	metrics, err := ag.get("/metrics/probes")
	if err != nil {
		b.Fatal(err)
	}
	s.probes = peerLivenessProbes(metrics)
	return s
}

// peerLivenessProbes sums prober_probe_total{probe_type="Liveness"}.
func peerLivenessProbes(metrics string) float64 {
	var n float64
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "prober_probe_total{") || !strings.Contains(line, `probe_type="Liveness"`) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			n += v
		}
	}
	return n
}

// peerRemovePods removes the manifests and waits for the pods to go.
func peerRemovePods(b *testing.B, ag peerAgent) {
	for i := range peerPods {
		_ = os.Remove(filepath.Join(ag.manifestDir, fmt.Sprintf("peer%02d.yaml", i)))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		pods, err := peerPodList(ag)
		if err != nil || len(pods) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Logf("%s: pods still listed 2 minutes after their manifests went", b.Name())
}

// peerBusyLoops starts n busy shell loops in their own process groups and
// returns their stop.
func peerBusyLoops(b *testing.B, n int) (stop func()) {
	var cmds []*exec.Cmd
	for range n {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	stop = func() {
		for _, c := range cmds {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
		cmds = nil
	}
	b.Cleanup(stop)
	return stop
}

// peerTreeCPU sums utime+stime+cutime+cstime over roots and all their
// descendants.
func peerTreeCPU(roots []int) uint64 {
	children := map[int][]int{}
	for _, pid := range pids() {
		if st, ok := peerStat(pid); ok {
			children[st.ppid] = append(children[st.ppid], pid)
		}
	}
	seen := map[int]bool{}
	var total uint64
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] || pid <= 1 {
			return
		}
		seen[pid] = true
		if st, ok := peerStat(pid); ok {
			total += st.cpu
		}
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return total
}

type peerProcStat struct {
	ppid int
	cpu  uint64 // utime+stime+cutime+cstime
}

func peerStat(pid int) (peerProcStat, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return peerProcStat{}, false
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// After the command: state ppid ... utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return peerProcStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	var cpu uint64
	for _, i := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			return peerProcStat{}, false
		}
		cpu += uint64(v)
	}
	return peerProcStat{ppid: ppid, cpu: cpu}, true
}

// peerShims are the containerd shims of the containerd on sock.
func peerShims(sock string) []int {
	var out []int
	for _, pid := range pids() {
		argv := procArgv(pid)
		if len(argv) == 0 || !strings.Contains(filepath.Base(argv[0]), "containerd-shim") {
			continue
		}
		for i := range argv[:len(argv)-1] {
			if argv[i] == "-address" && argv[i+1] == sock {
				out = append(out, pid)
			}
		}
	}
	return out
}

// peerContainerd starts this benchmark's own containerd and returns its
// CRI endpoint, socket and pid; it is removed when b ends.
func peerContainerd(b *testing.B) (endpoint, sock string, pid int) {
	b.Helper()
	state, err := os.MkdirTemp("", "minilet-peer-containerd")
	if err != nil {
		b.Fatal(err)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		out, err := exec.Command(filepath.Join(repo, "scripts", "containerd-down.sh"), state).CombinedOutput()
		if err != nil {
			b.Logf("containerd-down.sh %s: %v\n%s", state, err, out)
		}
		_ = os.RemoveAll(state)
	})
	out, err := exec.Command(filepath.Join(repo, "scripts", "containerd-up.sh"), state).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			b.Skipf("scripts/containerd-up.sh %s failed: %v\n%s", state, err, ee.Stderr)
		}
		b.Skipf("scripts/containerd-up.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	endpoint = lines[len(lines)-1]
	raw, err := os.ReadFile(filepath.Join(state, "containerd.pid"))
	if err != nil {
		b.Fatal(err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		b.Fatal(err)
	}
	return endpoint, strings.TrimPrefix(endpoint, "unix://"), pid
}

func peerKubeletConfig(dir, endpoint, cgroupRoot string, port, roPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %[1]s/manifests
containerRuntimeEndpoint: %[2]s
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: %[3]s
failSwapOn: false
failCgroupV1: false
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: 127.0.0.1
port: %[4]d
readOnlyPort: %[5]d
healthzPort: 0
podLogsDir: %[1]s/logs
makeIPTablesUtilChains: false
protectKernelDefaults: true
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
`, dir, endpoint, cgroupRoot, port, roPort)
}

func startPeerKubelet(b *testing.B, bin, endpoint, cgroupRoot string) peerAgent {
	b.Helper()
	dir, err := os.MkdirTemp("", "minilet-peer-kubelet")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	for _, d := range []string{"manifests", "logs", "root", "pki"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	// The kubelet checks that its cgroup root exists in every hierarchy.
	if err := harness.MakeCgroupRoot(cgroupRoot); err != nil {
		b.Fatal(err)
	}
	port, roPort := harness.FreePort(b), harness.FreePort(b)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(peerKubeletConfig(dir, endpoint, cgroupRoot, port, roPort)), 0o644); err != nil {
		b.Fatal(err)
	}
	nodeName := fmt.Sprintf("peer-kubelet-%d", os.Getpid()%10000)
	var k *harness.UpstreamKubelet
	b.Cleanup(func() { // after it is stopped
		if b.Failed() && k != nil {
			b.Logf("kubelet log (tail):\n%s", k.Log(6000))
		}
	})
	// Its own /var/lib and /var/log: nothing of it is left on the host.
	// It stops at the end, after peerRun's cleanup has removed the pods.
	k, err = harness.StartUpstreamKubelet(b, dir, bin, harness.UpstreamKubeletOptions{Tmpfs: []string{"/var/lib", "/var/log"}}, "--config", cfg,
		"--root-dir", filepath.Join(dir, "root"), "--cert-dir", filepath.Join(dir, "pki"), "--hostname-override", nodeName, "--v", "1")
	if err != nil {
		b.Skipf("starting the kubelet: %v", err)
	}
	done := k.Done
	logTail := func() string { return k.Log(6000) }
	base := fmt.Sprintf("http://127.0.0.1:%d", roPort)
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (string, error) {
		resp, err := client.Get(base + path)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, body)
		}
		return string(body), nil
	}
	deadline := time.Now().Add(harness.Deadline)
	for {
		if _, err := get("/pods"); err == nil {
			break
		}
		select {
		case <-done:
			b.Skipf("the kubelet exited during start:\n%s", logTail())
		default:
		}
		if time.Now().After(deadline) {
			b.Skipf("the kubelet's read-only port did not answer within %s:\n%s", harness.Deadline, logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A misspelt field is only a warning to the kubelet, and one of these
	// would undo a guard of the host above.
	if raw, _ := os.ReadFile(filepath.Join(dir, "kubelet.log")); strings.Contains(string(raw), "lenient decoding") {
		b.Fatalf("the kubelet ignored fields of %s:\n%s", cfg, logTail())
	}
	kpid := k.Pid
	return peerAgent{name: "kubelet", manifestDir: filepath.Join(dir, "manifests"), nodeName: nodeName, get: get,
		agentProcs: func() []int { return []int{kpid} }}
}

// peerClearContainerd removes every sandbox of the private containerd, so
// that the next agent starts on an empty runtime.
func peerClearContainerd(b *testing.B, endpoint string) {
	ctx, cancel := context.WithTimeout(context.Background(), harness.Deadline)
	defer cancel()
	rt, err := remote.New(ctx, remote.Config{Endpoint: endpoint, RequestTimeout: harness.Deadline})
	if err != nil {
		b.Errorf("connecting to %s: %v", endpoint, err)
		return
	}
	defer rt.Close(ctx) //nolint:errcheck // best-effort cleanup
	list, err := rt.ListPodSandbox(ctx, nil)
	if err != nil {
		b.Errorf("listing sandboxes: %v", err)
		return
	}
	for _, sb := range list {
		_ = rt.StopPodSandbox(ctx, sb.GetId())
		if err := rt.RemovePodSandbox(ctx, sb.GetId()); err != nil {
			b.Errorf("removing sandbox %s: %v", sb.GetId(), err)
		}
	}
}
