// Package conformance is one behavioural test suite for every CRI runtime
// minilet drives (the embedded runtime and, through cri-client, containerd
// or CRI-O): sandbox and container lifecycle, exit codes and reasons, CRI
// log format, file mounts, graceful stop, ExecSync, list filters, cgroup limits, OOM
// kills, pod networking (own IP and hostname, host ports, pod to pod) and,
// where supported, survival of an agent restart.
//
// Tests need root, a cgroup v1 (or v2) hierarchy under /sys/fs/cgroup, and
// /bin/sh, sleep and python3 in the image (the host image by default).
package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeUnderTest is what the suite drives: a CRI runtime and image service.
type RuntimeUnderTest interface {
	criapi.RuntimeService
	criapi.ImageManagerService
}

// Options tune the suite to the runtime under test.
type Options struct {
	// Image is the image every test container runs. Default: "host".
	Image string
	// Restart, when set, closes rt, calls whileDown, and returns a new
	// runtime on the same state (an agent restart). The restart test is
	// skipped when nil.
	Restart func(t *testing.T, rt RuntimeUnderTest, whileDown func()) RuntimeUnderTest
	// CgroupMount is where the host's cgroups are mounted. Default:
	// /sys/fs/cgroup.
	CgroupMount string
}

// Option sets one of the Options.
type Option func(*Options)

// WithImage makes test containers run image instead of "host".
func WithImage(image string) Option { return func(o *Options) { o.Image = image } }

// WithRestart enables the restart-survival test; see Options.Restart.
func WithRestart(fn func(t *testing.T, rt RuntimeUnderTest, whileDown func()) RuntimeUnderTest) Option {
	return func(o *Options) { o.Restart = fn }
}

// waitTimeout bounds every wait for a state change. Generous: CI machines
// are busy.
const waitTimeout = 30 * time.Second

// Run runs the suite. newRuntime returns a fresh runtime for one test (with
// its own state); the suite does not close it (the caller's t.Cleanup does).
func Run(t *testing.T, newRuntime func(t *testing.T) RuntimeUnderTest, opts ...Option) {
	o := Options{Image: "host", CgroupMount: "/sys/fs/cgroup"}
	for _, fn := range opts {
		fn(&o)
	}
	s := &suite{opts: o, newRuntime: newRuntime}
	tests := []namedTest{
		{"Lifecycle", s.testLifecycle},
		{"ExitCodes", s.testExitCodes},
		{"Logs", s.testLogs},
		{"FileMount", s.testFileMount},
		{"StopWithGrace", s.testStopWithGrace},
		{"StopGracefully", s.testStopGracefully},
		{"ExecSync", s.testExecSync},
		{"ListFilters", s.testListFilters},
		{"CgroupLimits", s.testCgroupLimits},
		{"OOMKilled", s.testOOMKilled},
		{"RestartSurvival", s.testRestartSurvival},
		{"Images", s.testImages},
		{"PodNetwork", s.testPodNetwork},
	}
	tests = append(tests, securityTests(s)...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// RunSecurity runs only the security-context part of the suite (which needs
// /bin/sh, id, grep, awk, wc, tr, mktemp, tail and sleep in the image), for images
// that lack what the rest needs.
func RunSecurity(t *testing.T, newRuntime func(t *testing.T) RuntimeUnderTest, opts ...Option) {
	o := Options{Image: "host", CgroupMount: "/sys/fs/cgroup"}
	for _, fn := range opts {
		fn(&o)
	}
	s := &suite{opts: o, newRuntime: newRuntime}
	for _, tc := range securityTests(s) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type namedTest struct {
	name string
	fn   func(t *testing.T)
}

func securityTests(s *suite) []namedTest {
	return []namedTest{
		{"SecurityContext", s.testSecurityContext},
		{"ReadOnlyRoot", s.testReadOnlyRoot},
		{"SeccompLocalhostMissing", s.testSeccompLocalhostMissing},
		{"Sysctls", s.testSysctls},
		{"ExecConfined", s.testExecConfined},
		// A container from an image sees its own cgroups, not the host's.
		{"CgroupLimits", s.testOwnCgroupLimits},
	}
}

type suite struct {
	opts       Options
	newRuntime func(t *testing.T) RuntimeUnderTest
}

// rtHandle is the runtime a test talks to; the restart test swaps it, and
// cleanups use whichever runtime is current when they run.
type rtHandle struct {
	RuntimeUnderTest
}

func (s *suite) runtime(t *testing.T) *rtHandle {
	return &rtHandle{RuntimeUnderTest: s.newRuntime(t)}
}

var podCounter atomic.Int64

// pod is a sandbox created for one test.
type pod struct {
	id     string
	config *runtimeapi.PodSandboxConfig
	logDir string
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// newPod runs a sandbox with a unique cgroup parent and log directory, and
// removes both (and the sandbox) when the test ends.
func (s *suite) newPod(t *testing.T, rt *rtHandle, labels map[string]string) *pod {
	t.Helper()
	return s.newPodWith(t, rt, labels, nil)
}

// newPodWith is newPod with the sandbox config changed by edit first.
func (s *suite) newPodWith(t *testing.T, rt *rtHandle, labels map[string]string, edit func(*runtimeapi.PodSandboxConfig)) *pod {
	t.Helper()
	n := podCounter.Add(1)
	name := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	name = strings.Trim(name, "-")
	parent := fmt.Sprintf("/minilet-conformance-%s-%d-%d", name, os.Getpid(), n)
	uid := fmt.Sprintf("uid-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), n)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("p%d", n), Namespace: "conformance", Uid: uid},
		Labels:       labels,
		Annotations:  map[string]string{"test": t.Name()},
		LogDirectory: t.TempDir(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
	}
	if edit != nil {
		edit(cfg)
	}
	ctx := context.Background()
	id, err := rt.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		_ = rt.StopPodSandbox(ctx, id)
		if err := rt.RemovePodSandbox(ctx, id); err != nil {
			t.Errorf("RemovePodSandbox %s: %v", id, err)
		}
		s.removeCgroupParent(parent)
	})
	return &pod{id: id, config: cfg, logDir: cfg.LogDirectory}
}

// removeCgroupParent deletes the pod's cgroup parent from every hierarchy
// (the runtime removes only the containers' own cgroups).
func (s *suite) removeCgroupParent(parent string) {
	_ = os.Remove(filepath.Join(s.opts.CgroupMount, parent))
	entries, _ := os.ReadDir(s.opts.CgroupMount)
	for _, e := range entries {
		if e.IsDir() {
			_ = os.Remove(filepath.Join(s.opts.CgroupMount, e.Name(), parent))
		}
	}
}

// containerConfig is a container of the test image running cmd.
func (s *suite) containerConfig(name string, cmd ...string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: s.opts.Image},
		Command:  cmd,
		LogPath:  name + "/0.log",
		Labels:   map[string]string{"container": name},
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{}},
	}
}

// create creates a container in p and returns its id.
func (s *suite) create(t *testing.T, rt *rtHandle, p *pod, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	id, err := rt.CreateContainer(context.Background(), p.id, cfg, p.config)
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return id
}

// run creates and starts a container in p.
func (s *suite) run(t *testing.T, rt *rtHandle, p *pod, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	id := s.create(t, rt, p, cfg)
	if err := rt.StartContainer(context.Background(), id); err != nil {
		t.Fatalf("StartContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return id
}

// status returns a container's status, failing the test on error.
func status(t *testing.T, rt RuntimeUnderTest, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := rt.ContainerStatus(context.Background(), id, false)
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.GetStatus()
}

// waitState polls until the container reaches state.
func waitState(t *testing.T, rt RuntimeUnderTest, id string, state runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
	t.Helper()
	var st *runtimeapi.ContainerStatus
	waitFor(t, fmt.Sprintf("container %s to be %s", id, state), func() bool {
		st = status(t, rt, id)
		return st.GetState() == state
	})
	return st
}

// waitFor polls cond every 20ms until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logLine is one parsed CRI log line.
type logLine struct {
	time    time.Time
	stream  string
	tag     string
	content string
}

var logLineRE = regexp.MustCompile(`^(\S+) (stdout|stderr) (F|P) (.*)$`)

// readLog parses a CRI-format log file, failing on any malformed line.
func readLog(t *testing.T, path string) []logLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	var out []logLine
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if l == "" {
			continue
		}
		m := logLineRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("log line not in CRI format: %q", l)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("log line timestamp %q: %v", m[1], err)
		}
		out = append(out, logLine{time: ts, stream: m[2], tag: m[3], content: m[4]})
	}
	return out
}

// logText joins the full lines of one stream (P parts are concatenated).
func logText(lines []logLine, stream string) []string {
	var out []string
	var cur strings.Builder
	for _, l := range lines {
		if l.stream != stream {
			continue
		}
		cur.WriteString(l.content)
		if l.tag == "F" {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if cur.Len() > 0 { // a last line without newline may end partial
		out = append(out, cur.String())
	}
	return out
}

// waitLog polls until the container's log contains want on stdout.
func waitLog(t *testing.T, path, want string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%q in %s", want, path), func() bool {
		data, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(data), " stdout F "+want+"\n")
	})
}
