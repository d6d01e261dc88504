package embedded

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkContainerStart measures create + start + observing RUNNING of a
// sleep container, and reports the monitor's resident memory, for monitors
// that re-execute the agent (here the test binary) and for the small
// cmd/minilet-monitor binary.
func BenchmarkContainerStart(b *testing.B) {
	requireRoot(b)
	b.Run("reexec", func(b *testing.B) { benchContainerStart(b, "") })
	b.Run("small-monitor", func(b *testing.B) { benchContainerStart(b, smallMonitor(b)) })
}

func benchContainerStart(b *testing.B, monitorPath string) {
	r := newTestRuntimeWith(b, Config{RootDir: b.TempDir(), MonitorPath: monitorPath})
	sb, _ := testSandbox(b, r)
	ctx := context.Background()
	var rssTotal, anonTotal, rssSamples int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, err := r.CreateContainer(ctx, sb, hostContainer(fmt.Sprintf("c%d", i), "sleep", "1000"), nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.StartContainer(ctx, id); err != nil {
			b.Fatal(err)
		}
		resp, err := r.ContainerStatus(ctx, id, true)
		if err != nil || resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			b.Fatalf("status = %v, %v; want RUNNING", resp, err)
		}
		b.StopTimer()
		pid, _ := strconv.Atoi(resp.GetInfo()["monitorPid"])
		if kib := procStatusKiB(pid, "VmRSS:"); kib > 0 {
			rssTotal += kib
			anonTotal += procStatusKiB(pid, "RssAnon:")
			rssSamples++
		}
		if err := r.RemoveContainer(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	if rssSamples > 0 {
		b.ReportMetric(float64(rssTotal)/float64(rssSamples), "monitor-RSS-KiB")
		// The anonymous part is what each monitor costs; the rest is the
		// agent binary's text, shared through the page cache.
		b.ReportMetric(float64(anonTotal)/float64(rssSamples), "monitor-RssAnon-KiB")
	}
}

// procStatusKiB reads a "kB" field (VmRSS:, RssAnon:) of pid's
// /proc/<pid>/status, or 0.
func procStatusKiB(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
