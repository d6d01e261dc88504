package conformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/conformance/imagereg"
	"github.com/minilet/minilet/test/harness"
)

// The environment that drives TestNodeConformance (`make conformance`
// sets it).
const (
	// EnvEnable runs the suite: it builds e2e.test (many minutes cold) and
	// runs for up to hours, so nothing else runs it.
	EnvEnable = "MINILET_CONFORMANCE"
	// EnvRuntime is the node's runtime: embedded (default) or containerd
	// (a private one, started by scripts/containerd-up.sh); or kubelet,
	// the reference column: the upstream kubelet of the control plane's
	// version on a private containerd instead of minilet.
	EnvRuntime = "MINILET_CONFORMANCE_RUNTIME"
	// EnvFocus is the specs to run, a ginkgo focus regexp (default
	// DefaultFocus).
	EnvFocus = "MINILET_CONFORMANCE_FOCUS"
	// EnvExtraSkip narrows a partial run: one more ginkgo skip regexp on
	// top of skip.txt (e.g. `\[Slow\]`), named in results.md.
	EnvExtraSkip = "MINILET_CONFORMANCE_SKIP"
	// EnvProcs is how many ginkgo processes run specs at once (default 1).
	EnvProcs = "MINILET_CONFORMANCE_PROCS"
	// EnvReportDir is where the JUnit report, the results table and the
	// logs go (default /tmp/minilet-conformance/RUNTIME-TIME).
	EnvReportDir = "MINILET_CONFORMANCE_REPORT_DIR"
	// EnvTimeout bounds the whole suite (ginkgo --timeout; default 3h).
	EnvTimeout = "MINILET_CONFORMANCE_TIMEOUT"
)

// DefaultFocus selects every spec tagged [NodeConformance].
const DefaultFocus = `\[NodeConformance\]`

// TestNodeConformance runs the upstream e2e suite's [NodeConformance] specs
// against one minilet node of a real control plane, with the test images
// from a loopback registry, and writes the results table (results.md) into
// the report directory. Spec failures are its findings, not its failure:
// it fails only when the suite could not run (no report, or the suite's
// set-up failed).
func TestNodeConformance(t *testing.T) {
	if os.Getenv(EnvEnable) != "1" {
		t.Skipf("the upstream [NodeConformance] specs run only with %s=1 (make conformance RUNTIME=embedded|containerd): the first run builds e2e.test (many minutes), a full run takes hours", EnvEnable)
	}
	t.Setenv(clustertest.EnvEnable, "1") // the control plane of the cluster tests
	rt := envOr(EnvRuntime, "embedded")
	if rt != "embedded" && rt != "containerd" && rt != "kubelet" {
		t.Fatalf("%s=%q: want embedded, containerd or kubelet", EnvRuntime, rt)
	}
	procs, err := strconv.Atoi(envOr(EnvProcs, "1"))
	if err != nil || procs < 1 {
		t.Fatalf("%s=%q: want a positive number of processes", EnvProcs, os.Getenv(EnvProcs))
	}
	timeout, err := time.ParseDuration(envOr(EnvTimeout, "3h"))
	if err != nil {
		t.Fatalf("%s: %v", EnvTimeout, err)
	}
	skip, err := readSkipList(filepath.Join(sourceDir(), "skip.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// A partial run (e.g. without the [Slow] specs) narrows the set on top
	// of the argued skip list; results.md names it.
	extraSkip := os.Getenv(EnvExtraSkip)
	if extraSkip != "" {
		skip = append(skip, extraSkip)
	}
	reportDir := envOr(EnvReportDir, filepath.Join(os.TempDir(), "minilet-conformance", rt+"-"+time.Now().UTC().Format("20060102-150405")))

	start := time.Now()
	bins, err := clusterbin.EnsureConformance(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance binaries %s (%s)", bins.Dir, time.Since(start).Round(time.Second))

	run := suiteRun{
		runtime: rt, focus: envOr(EnvFocus, DefaultFocus), skip: skip,
		procs: procs, timeout: timeout, reportDir: reportDir,
		// The run takes long: its progress goes to the terminal as it comes.
		progress: os.Stdout,
	}
	if extraSkip != "" {
		run.note = fmt.Sprintf("partial run: also skipped `%s` (%s)", extraSkip, EnvExtraSkip)
	}
	run.run(t, bins)
}

// suiteRun is one run of the upstream suite against one node of a fresh
// control plane.
type suiteRun struct {
	runtime   string // embedded, containerd or kubelet
	focus     string // ginkgo focus regexp
	skip      []string
	procs     int
	timeout   time.Duration // of the whole suite
	reportDir string        // created if missing
	note      string        // a line for results.md's header ("": none)
	progress  io.Writer     // gets e2e.test's output as it comes besides e2e.log (nil: only the log)
}

// run starts the test image registry, the control plane and the node,
// runs e2e.test with bins, writes node.log and results.md into the report
// directory and returns the specs of the JUnit report. It fails t only when
// the suite could not run (no report, or the suite's set-up failed): spec
// failures are for the caller to judge.
func (r suiteRun) run(t *testing.T, bins clusterbin.Set) ([]Spec, Summary) {
	t.Helper()
	if err := os.MkdirAll(r.reportDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("report directory: %s", r.reportDir)

	ctx := context.Background()
	reg, err := imagereg.Start(ctx, t.TempDir(), imagereg.Binaries{Agnhost: bins.Path(clusterbin.Agnhost)}, t.Logf)
	if err != nil {
		t.Fatalf("test image registry: %v", err)
	}
	t.Cleanup(func() { _ = reg.Close() })

	srv := clustertest.Start(t, clustertest.Options{ControlPlane: true})
	var node testNode
	if r.runtime == "kubelet" {
		node = startKubeletNode(t, srv)
	} else {
		node = startNode(t, srv, r.runtime)
	}
	waitReady(t, srv, node.name)

	args := e2eArgs(srv, node, reg, r.reportDir)
	cmd := e2eCommand(bins, r.procs, r.focus, r.skip, r.timeout, args)
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+reg.RepoList())
	logPath := filepath.Join(r.reportDir, "e2e.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() //nolint:errcheck // written by the child; closed after
	cmd.Stdout = logFile
	if r.progress != nil {
		cmd.Stdout = io.MultiWriter(logFile, r.progress)
	}
	cmd.Stderr = cmd.Stdout
	t.Logf("running (%d skip entries, %d procs): %s", len(r.skip), r.procs, strings.Join(cmd.Args, " "))
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("e2e run ended after %s: %v (log %s)", time.Since(start).Round(time.Second), runErr, logPath)
	if err := os.WriteFile(filepath.Join(r.reportDir, "node.log"), []byte(node.logs()), 0o644); err != nil {
		t.Error(err)
	}

	specs, sum, err := ParseJUnitFile(filepath.Join(r.reportDir, "junit_01.xml"))
	if err != nil {
		t.Fatalf("no results (e2e.test: %v): %v", runErr, err)
	}
	table := filepath.Join(r.reportDir, "results.md")
	f, err := os.Create(table)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "# [NodeConformance] on one node (%s)\n\nfocus `%s`, skip list test/conformance/skip.txt, %s, %s\n\n",
		r.runtime, r.focus, time.Now().UTC().Format(time.RFC3339), runtime.Version())
	if r.note != "" {
		fmt.Fprintf(f, "%s\n\n", r.note)
	}
	if err := WriteTable(f, specs, sum); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Result == Failed {
			t.Logf("FAILED %s: %s", s.Name, s.Detail)
		}
	}
	t.Logf("%s runtime: %s; table %s", r.runtime, sum, table)
	for _, s := range specs {
		if strings.Contains(s.Name, "BeforeSuite") && s.Result == Failed {
			t.Errorf("the suite's set-up failed, no spec ran: %s", s.Detail)
		}
	}
	return specs, sum
}

// testNode is the node under test, whichever agent runs it.
type testNode struct {
	name     string
	rootDir  string        // the agent's --root-dir
	endpoint string        // the CRI endpoint, "" on the embedded runtime
	logs     func() string // the agent's log so far
}

// startNode joins one minilet to srv on runtime rt.
func startNode(t *testing.T, srv *clustertest.Server, rt string) testNode {
	t.Helper()
	a := harness.New(t)
	a.NodeName = fmt.Sprintf("minilet-%d", os.Getpid()%100000)
	a.ExtraArgs = srv.AgentArgs(a.NodeName)
	a.ExtraArgs = append(a.ExtraArgs, "--port", strconv.Itoa(kubeletPort(t)))
	n := testNode{name: a.NodeName, rootDir: a.RootDir, logs: a.Logs}
	if rt == "containerd" {
		n.endpoint = privateContainerd(t)
		a.ExtraArgs = append(a.ExtraArgs, "--container-runtime-endpoint", n.endpoint)
	}
	a.Start()
	return n
}

// kubeletPort is 10250, the kubelet's port, when it is free: some specs'
// helpers (and the suite's failure dumps) reach a node's kubelet API on
// 10250, not on the port the node reports. Else a free one.
func kubeletPort(t *testing.T) int {
	if ln, err := net.Listen("tcp", ":10250"); err == nil {
		_ = ln.Close()
		return 10250
	}
	return harness.FreePort(t)
}

// waitReady waits until node name is registered and Ready.
func waitReady(t *testing.T, srv *clustertest.Server, name string) {
	t.Helper()
	ctx := context.Background()
	harness.Eventually(t, "the node registered and Ready", func() (bool, string) {
		n, err := srv.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, c.Message
			}
		}
		return false, "no Ready condition"
	})
}

// e2eArgs are e2e.test's own flags: the cluster, where results go, and
// what the suite's set-up must expect of a cluster that has one node and
// no add-ons (no pods in kube-system, no cloud).
func e2eArgs(srv *clustertest.Server, node testNode, reg *imagereg.Registry, reportDir string) []string {
	args := []string{
		"--kubeconfig=" + srv.AdminKubeconfig(),
		"--provider=skeleton",
		"--kubectl-path=" + srv.KubectlCommand().Path,
		"--report-dir=" + reportDir,
		"--e2e-output-dir=" + reportDir,
		"--kube-test-repo-list=" + reg.RepoList(),
		// kube-system is empty: no add-on pods to wait for.
		"--minStartupPods=0",
		"--allowed-not-ready-nodes=0",
		"--node-os-distro=debian",
		"--kubelet-root-dir=" + node.rootDir,
		"--dump-logs-on-failure=true",
		"--disable-log-dump",
	}
	if node.endpoint != "" {
		args = append(args, "--container-runtime-endpoint="+node.endpoint)
	}
	return args
}

// e2eCommand runs e2e.test, in procs ginkgo processes through the ginkgo
// CLI when procs > 1.
func e2eCommand(bins clusterbin.Set, procs int, focus string, skip []string, timeout time.Duration, args []string) *exec.Cmd {
	gflags := []string{"focus=" + focus, "timeout=" + timeout.String(), "no-color", "silence-skips"}
	if len(skip) > 0 {
		gflags = append(gflags, "skip="+strings.Join(skip, "|"))
	}
	if procs == 1 {
		all := append([]string{}, args...)
		for _, f := range gflags {
			all = append(all, "--ginkgo."+f)
		}
		return exec.Command(bins.Path(clusterbin.E2ETest), all...)
	}
	all := []string{fmt.Sprintf("--procs=%d", procs)}
	for _, f := range gflags {
		all = append(all, "--"+f)
	}
	all = append(all, bins.Path(clusterbin.E2ETest), "--")
	return exec.Command(bins.Path(clusterbin.Ginkgo), append(all, args...)...)
}

// readSkipList reads skip.txt: one ginkgo skip regexp a line, each after
// the comment lines (#) that argue it; blank lines separate entries.
func readSkipList(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read only
	var entries []string
	argued := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			argued = false
		case strings.HasPrefix(line, "#"):
			argued = argued || strings.TrimSpace(strings.TrimPrefix(line, "#")) != ""
		case !argued:
			return nil, fmt.Errorf("%s:%d: skip entry %q has no reason: put the comment that argues it right above it", path, n, line)
		default:
			entries = append(entries, line)
		}
	}
	return entries, sc.Err()
}

// privateContainerd starts a containerd of the test's own with
// scripts/containerd-up.sh, removed with all it ran when the test ends,
// and returns its CRI endpoint.
func privateContainerd(t *testing.T) string {
	t.Helper()
	state, err := os.MkdirTemp("", "mlt-cd-")
	if err != nil {
		t.Fatal(err)
	}
	scripts := filepath.Join(sourceDir(), "..", "..", "scripts")
	t.Cleanup(func() {
		if out, err := exec.Command(filepath.Join(scripts, "containerd-down.sh"), state).CombinedOutput(); err != nil {
			t.Errorf("containerd-down.sh: %v\n%s", err, out)
		}
	})
	cmd := exec.Command(filepath.Join(scripts, "containerd-up.sh"), state)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("containerd-up.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
