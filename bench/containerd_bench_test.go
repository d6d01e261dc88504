package bench

// Pod start on containerd (issue 8): the same one-container busybox pod
// (host network, `sleep`) started two ways against the same containerd,
// interleaved in one run so both see the same machine load:
//   - minilet: manifest renamed into the agent's folder → GET /pods shows
//     the pod Running with its container running (polled every ms);
//   - direct: RunPodSandbox + CreateContainer + StartContainer through the
//     CRI client, timed until StartContainer returns.
// The ratio of the medians is minilet's overhead over bare CRI calls
// (target ≤ 1.15x). Needs MINILET_CONTAINERD_ENDPOINT (make test / make
// bench after scripts/containerd-up.sh); MINILET_BENCH_PODS sets the count.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/test/harness"
)

func BenchmarkContainerdPodStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("agent benchmarks need root (cgroups); CI runs as root")
	}
	ep := harness.ContainerdEndpoint(b)
	n := 20
	if v, err := strconv.Atoi(os.Getenv("MINILET_BENCH_PODS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	rt, err := remote.New(ctx, remote.Config{Endpoint: ep})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close(ctx) })

	a := harness.New(b)
	a.UseContainerd()
	a.ExtraArgs = append(a.ExtraArgs, "--log-level", "info")
	a.Start()

	var viaMinilet, direct []time.Duration
	b.ResetTimer()
	for i := range n {
		direct = append(direct, cdBenchDirect(b, rt, i))
		viaMinilet = append(viaMinilet, cdBenchMinilet(b, a, i))
	}
	b.StopTimer()

	m, d := cdBenchMedian(viaMinilet), cdBenchMedian(direct)
	b.ReportMetric(cdBenchMs(m), "minilet-p50-ms")
	b.ReportMetric(cdBenchMs(d), "direct-cri-p50-ms")
	b.ReportMetric(float64(m)/float64(d), "ratio-p50")
	b.ReportMetric(float64(cdBenchSum(viaMinilet))/float64(cdBenchSum(direct)), "ratio-mean")
	b.Logf("%d pods: minilet p50 %.1f ms (min %.1f), direct CRI p50 %.1f ms (min %.1f), ratio %.2fx",
		n, cdBenchMs(m), cdBenchMs(slices.Min(viaMinilet)), cdBenchMs(d), cdBenchMs(slices.Min(direct)), float64(m)/float64(d))
}

// cdBenchMinilet starts pod i through the agent and returns manifest →
// Running; the pod is deleted (and gone) before it returns.
func cdBenchMinilet(b *testing.B, a *harness.Agent, i int) time.Duration {
	b.Helper()
	name := fmt.Sprintf("cdbench%03d", i)
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, imagePullPolicy: IfNotPresent, command: ["sleep", "100000"]}
`, name, harness.BusyboxImage)
	static := a.Static(name)
	start := time.Now()
	a.WriteManifest(name+".yaml", manifest)
	cdBenchWait(b, "pod "+static+" Running", func() bool {
		p, ok := a.Pod(static)
		if !ok || p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		return p.Status.ContainerStatuses[0].State.Running != nil
	})
	took := time.Since(start)
	b.StopTimer()
	a.RemoveManifest(name + ".yaml")
	cdBenchWait(b, "pod "+static+" gone", func() bool {
		_, ok := a.Pod(static)
		return !ok
	})
	b.StartTimer()
	return took
}

// cdBenchDirect creates the same sandbox and container with bare CRI
// calls and returns how long they took; it removes them afterwards.
func cdBenchDirect(b *testing.B, rt *remote.Runtime, i int) time.Duration {
	b.Helper()
	ctx := context.Background()
	uid := fmt.Sprintf("cdbench-direct-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), i)
	parent := "/minilet-cdbench-" + uid
	logDir := filepath.Join(b.TempDir(), uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		b.Fatal(err)
	}
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("direct%03d", i), Namespace: "default", Uid: uid},
		LogDirectory: logDir,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: parent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD,
			}},
		},
	}
	ctrCfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: harness.BusyboxImage},
		Command:  []string{"sleep", "100000"},
		LogPath:  "main/0.log",
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2}},
	}
	start := time.Now()
	sb, err := rt.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		b.Fatalf("RunPodSandbox: %v", err)
	}
	id, err := rt.CreateContainer(ctx, sb, ctrCfg, sbCfg)
	if err != nil {
		b.Fatalf("CreateContainer: %v", err)
	}
	if err := rt.StartContainer(ctx, id); err != nil {
		b.Fatalf("StartContainer: %v", err)
	}
	took := time.Since(start)
	b.StopTimer()
	_ = rt.StopPodSandbox(ctx, sb)
	if err := rt.RemovePodSandbox(ctx, sb); err != nil {
		b.Fatalf("RemovePodSandbox: %v", err)
	}
	cdBenchRemoveCgroup(parent)
	b.StartTimer()
	return took
}

// cdBenchRemoveCgroup removes a sandbox's cgroup parent (and any empty
// directories containerd left in it) from every hierarchy.
func cdBenchRemoveCgroup(parent string) {
	hier, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hier {
		base := filepath.Join("/sys/fs/cgroup", h.Name(), parent)
		kids, _ := os.ReadDir(base)
		for _, k := range kids {
			if k.IsDir() {
				_ = os.Remove(filepath.Join(base, k.Name()))
			}
		}
		_ = os.Remove(base)
	}
}

func cdBenchWait(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(harness.Deadline)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func cdBenchMedian(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func cdBenchSum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func cdBenchMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
