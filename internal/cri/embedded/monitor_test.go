package embedded

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var (
	smallMonitorOnce sync.Once
	smallMonitorDir  string
	smallMonitorPath string
	smallMonitorErr  error
)

// smallMonitor builds cmd/minilet-monitor once per test process and returns
// its path, with cmd/minilet-exec next to it (so runtimes using it exec
// through the C exec helper, as the installed agent does); TestMain removes
// them.
func smallMonitor(t testing.TB) string {
	t.Helper()
	smallMonitorOnce.Do(func() {
		dir, err := os.MkdirTemp("", "minilet-monitor-test-")
		if err != nil {
			smallMonitorErr = err
			return
		}
		smallMonitorDir = dir
		smallMonitorPath = filepath.Join(dir, MonitorBinaryName)
		cmd := exec.Command("go", "build", "-o", smallMonitorPath, "github.com/minilet/minilet/cmd/minilet-monitor")
		if out, err := cmd.CombinedOutput(); err != nil {
			smallMonitorErr = errors.New("go build cmd/minilet-monitor: " + err.Error() + "\n" + string(out))
			return
		}
		// The C exec helper, as make build installs it (mandatory here:
		// these tests are about it).
		cmd = exec.Command("../../../scripts/build-exec-helper.sh", filepath.Join(dir, ExecHelperBinaryName))
		cmd.Env = append(os.Environ(), "MINILET_EXEC_HELPER=c")
		if out, err := cmd.CombinedOutput(); err != nil {
			smallMonitorErr = errors.New("scripts/build-exec-helper.sh: " + err.Error() + "\n" + string(out))
		}
	})
	if smallMonitorErr != nil {
		t.Fatal(smallMonitorErr)
	}
	return smallMonitorPath
}

func removeSmallMonitor() {
	if smallMonitorDir != "" {
		_ = os.RemoveAll(smallMonitorDir)
	}
}

func TestConformanceSmallMonitor(t *testing.T) {
	requireRoot(t)
	runConformance(t, smallMonitor(t))
}

// TestSmallMonitorRunsContainers runs containers under monitors started from
// the standalone binary: their process is that binary, named
// minilet-monitor, and output, exit codes and stops work as with a re-exec
// of the agent.
func TestSmallMonitorRunsContainers(t *testing.T) {
	requireRoot(t)
	bin := smallMonitor(t)
	r := newTestRuntimeWith(t, Config{RootDir: t.TempDir(), MonitorPath: bin})
	sb, _ := testSandbox(t, r)

	st, lines := runToExit(t, r, sb, hostContainer("exit3", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"))
	if st.ExitCode != 3 || st.Reason != monitorproc.ReasonError {
		t.Errorf("exit code %d reason %q, want 3 Error", st.ExitCode, st.Reason)
	}
	if strings.Join(lines, "|") != "stdout out|stderr err" && strings.Join(lines, "|") != "stderr err|stdout out" {
		t.Errorf("log lines %q, want one stdout and one stderr line", lines)
	}

	id := startContainer(t, r, sb, hostContainer("sleep", "sleep", "1000"))
	c, err := r.ctrs.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	mon := c.Start.MonitorPid
	exe, err := os.Readlink("/proc/" + strconv.Itoa(mon) + "/exe")
	if err != nil || exe != bin {
		t.Errorf("monitor executable %q (%v), want %q", exe, err, bin)
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(mon) + "/cmdline")
	if arg0, _, _ := strings.Cut(string(cmdline), "\x00"); arg0 != monitorproc.MonitorArg0 {
		t.Errorf("monitor argv[0] %q, want %q", arg0, monitorproc.MonitorArg0)
	}
	if err := r.StopContainer(context.Background(), id, 10); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if st := containerState(t, r, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 128+15 {
		t.Errorf("stopped container: state %v exit code %d, want EXITED 143", st.State, st.ExitCode)
	}
}

// TestSmallMonitorRootfsContainer runs a container from an image, whose
// container init is a re-exec of the monitor binary.
func TestSmallMonitorRootfsContainer(t *testing.T) {
	requireRoot(t)
	r := newTestRuntimeWith(t, Config{RootDir: t.TempDir(), MonitorPath: smallMonitor(t)})
	loadProbeImage(t, r, "example.com/probe:small", v1.Config{Entrypoint: []string{"/bin/probe"}})
	sb, _ := testSandbox(t, r)
	st, lines := runToExit(t, r, sb, imageContainerConfig("ls", "example.com/probe:small", nil, []string{"ls", "/"}))
	if st.ExitCode != 0 || len(lines) != 1 || lines[0] != "stdout bin dev etc image-marker proc sys tmp" {
		t.Fatalf("exit %d, log %q", st.ExitCode, lines)
	}
}

// Containers survive an agent restart whichever binary their monitor came
// from, and an agent adopts them whichever binary it would use itself.
func TestAdoptAcrossMonitorBinaries(t *testing.T) {
	requireRoot(t)
	bin := smallMonitor(t)
	t.Run("small monitor, re-exec adopter", func(t *testing.T) { testAdopt(t, bin, "") })
	t.Run("re-exec monitor, small adopter", func(t *testing.T) { testAdopt(t, "", bin) })
}
