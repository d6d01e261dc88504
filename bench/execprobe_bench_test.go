package bench

// Exec probe CPU on the embedded runtime: the CPU (user+system, this
// process and the helpers it waited for) and latency of one exec probe
// (`true` in a running host-image container, through the prober's exec
// probe and the runtime's ExecSync), with the exec helper being
//   - agent: the real agent binary (cmd/minilet), re-executed per probe
//     (what every probe cost before the monitor binary took the role);
//   - monitor: the small cmd/minilet-monitor binary's Go trampoline (what
//     every probe cost before cmd/minilet-exec);
//   - exec: cmd/minilet-exec, whose C part enters the container before any
//     Go runtime starts (the default when it is installed next to the
//     agent or the monitor).
// Containers' monitors are the small monitor binary in the last two.
// The goal is < 2 ms of CPU per probe.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/prober/probe"
	probeexec "github.com/minilet/minilet/internal/prober/probe/exec"
	"github.com/minilet/minilet/test/harness"
)

// execProbeBenchExecer adapts the embedded runtime's CRI ExecSync to the
// exec probe, as the agent does.
type execProbeBenchExecer struct{ rt *embedded.Runtime }

func (e execProbeBenchExecer) ExecSync(ctx context.Context, id container.ID, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	stdout, stderr, err := e.rt.ExecSync(ctx, id.ID, cmd, timeout)
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) {
		return stdout, stderr, int32(exitErr.ExitStatus()), nil
	}
	return stdout, stderr, 0, err
}

func BenchmarkExecProbeEmbedded(b *testing.B) {
	requireRootB(b)
	agent := harness.Binary(b)
	monitor := filepath.Join(filepath.Dir(agent), embedded.MonitorBinaryName)
	b.Run("agent", func(b *testing.B) { benchExecProbe(b, agent, agent) })
	b.Run("monitor", func(b *testing.B) { benchExecProbe(b, monitor, monitor) })
	b.Run("exec", func(b *testing.B) {
		benchExecProbe(b, monitor, filepath.Join(filepath.Dir(agent), embedded.ExecHelperBinaryName))
	})
}

func benchExecProbe(b *testing.B, monitor, helper string) {
	ctx := context.Background()
	rt, err := embedded.New(embedded.Config{RootDir: b.TempDir(), MonitorPath: monitor, ExecHelperPath: helper, Logger: imagesBenchLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rt.Close(ctx) }()
	parent := fmt.Sprintf("/minilet-bench-execprobe-%d-%d", os.Getpid(), time.Now().UnixNano())
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "bench", Namespace: "bench", Uid: "bench-uid"},
		LogDirectory: b.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_NODE}}},
	}, "")
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = rt.RemovePodSandbox(ctx, sb)
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}()
	id, err := rt.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: "host"}, Command: []string{"sleep", "100000"}, LogPath: "c.log",
	}, nil)
	if err == nil {
		err = rt.StartContainer(ctx, id)
	}
	if err != nil {
		b.Fatal(err)
	}
	e := execProbeBenchExecer{rt}
	cid := container.ID{Type: "embedded", ID: id}
	lat := make([]time.Duration, 0, b.N)
	cpu0, self0 := probeBenchCPU(), execProbeBenchSelfCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, out, err := probeexec.Probe(ctx, e, cid, []string{"true"}, time.Second)
		if err != nil || res != probe.Success {
			b.Fatalf("probe: %v %q %v", res, out, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	cpu, self := probeBenchCPU()-cpu0, execProbeBenchSelfCPU()-self0
	slices.Sort(lat)
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/probe")
	// The agent's side (this process: the runtime, the prober, the Go
	// runtime) apart from the helper and the command (its children).
	b.ReportMetric(float64(self.Microseconds())/1000/float64(b.N), "agent-cpu-ms/probe")
	b.ReportMetric(float64(probeBenchPercentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(probeBenchPercentile(lat, 0.99).Microseconds())/1000, "p99-ms")
	if st, err := os.Stat(helper); err == nil {
		b.ReportMetric(float64(st.Size())/(1<<20), "helper-MiB")
	}
}

// execProbeBenchSelfCPU is this process's own CPU time (user+system).
func execProbeBenchSelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
