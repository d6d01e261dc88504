package embedded

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/cri/embedded/podnet/podnettest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// helperAgentEnv makes the test binary act as a short-lived agent (see
// runHelperAgent) so that a test can restart "the agent" as a new process.
const helperAgentEnv = "MINILET_EMBEDDED_TEST_AGENT_ROOT"

// helperMonitorEnv is the helper agent's Config.MonitorPath.
const helperMonitorEnv = "MINILET_EMBEDDED_TEST_AGENT_MONITOR"

// runHelperAgent starts a sandbox and a container that waits for a release
// file, prints "<sandbox> <container>", and exits without Close, like an
// agent that crashed.
func runHelperAgent(root string) int {
	r, err := New(Config{RootDir: root, MonitorPath: os.Getenv(helperMonitorEnv),
		CNIConfDir: filepath.Join(root, "cni"), CNIBinDirs: []string{os.Getenv("CNI_BIN_DIR")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "test", Uid: "u"},
		LogDirectory: filepath.Join(root, "logs"),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: os.Getenv("CGROUP_PARENT")},
	}, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	script := "echo up; while [ ! -e " + root + "/release ]; do sleep 0.05; done; echo down; exit 9"
	id, err := r.CreateContainer(ctx, sb, hostContainer("c", "/bin/sh", "-c", script), nil)
	if err == nil {
		err = r.StartContainer(ctx, id)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(sb, id)
	return 0
}

func TestAdoptContainersOfAnExitedAgent(t *testing.T) {
	requireRoot(t)
	testAdopt(t, "", "")
}

// testAdopt runs a container from a helper agent whose monitors come from
// helperMonitor, lets the helper exit, and adopts the container into a
// runtime whose monitors come from adopterMonitor ("" for the re-exec of
// the test binary).
func testAdopt(t *testing.T, helperMonitor, adopterMonitor string) {
	root := t.TempDir()
	parent := fmt.Sprintf("/minilet-embedded-test-adopt-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), os.Getpid())
	// Whatever happens below, the helper's container must end.
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(root, "release"), nil, 0o644) })
	helper := exec.Command("/proc/self/exe")
	helper.Env = append(os.Environ(), helperAgentEnv+"="+root, "CGROUP_PARENT="+parent, helperMonitorEnv+"="+helperMonitor,
		"CNI_BIN_DIR="+podnettest.BinDir(t))
	out, err := helper.Output()
	if err != nil {
		t.Fatalf("helper agent: %v\n%s", err, out)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		t.Fatalf("helper agent printed %q, want two ids", out)
	}
	sb, id := fields[0], fields[1]

	r := newTestRuntimeWith(t, Config{RootDir: root, MonitorPath: adopterMonitor})
	t.Cleanup(func() {
		if err := r.RemovePodSandbox(context.Background(), sb); err != nil {
			t.Errorf("RemovePodSandbox: %v", err)
		}
		removeCgroupDirs(r, parent)
	})
	st := containerState(t, r, id)
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container of the exited agent: state %v, want RUNNING", st.GetState())
	}
	if err := os.WriteFile(filepath.Join(root, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the adopted container to exit", func() bool {
		return containerState(t, r, id).GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	st = containerState(t, r, id)
	if st.GetExitCode() != 9 {
		t.Errorf("adopted container exit code %d, want 9", st.GetExitCode())
	}
	if got := logText(t, st.GetLogPath()); got != "up\ndown\n" {
		t.Errorf("log of adopted container = %q, want both lines", got)
	}
}

// logText returns the content of a CRI log's stdout full lines.
func logText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	var b strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(l, " stdout F "); ok {
			b.WriteString(rest + "\n")
		}
	}
	return b.String()
}
