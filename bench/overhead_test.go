package bench

// Node overhead of the standalone agent (issue 2): 100 idle pods
// (`sleep`) on the embedded runtime; the agent's RSS and CPU over a quiet
// window, and the memory of all container monitors summed as PSS. Since
// issue 17 each pod has its own network, UTS and IPC namespaces (CNI), and
// the time until all are Running is reported too. (The kernel's memory for
// namespaces and veths is not in these figures: the host-wide counters
// that would show it move with everything else on a shared machine.)
//
// The window length is MINILET_OVERHEAD_SECONDS (default 15); the pod
// count is MINILET_BENCH_PODS (default 100). Nothing polls the agent's API
// during the window.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/test/harness"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat;
// it is 100 on every Linux architecture Go supports.
const clockTicks = 100

// procArgv returns a process's argv.
func procArgv(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(raw) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
}

// pids lists the numeric entries of /proc.
func pids() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// agentPid finds the `minilet run` process serving rootDir.
func agentPid(rootDir string) (int, bool) {
	for _, pid := range pids() {
		argv := procArgv(pid)
		if len(argv) < 2 || argv[1] != "run" || filepath.Base(argv[0]) != "minilet" {
			continue
		}
		for i := range argv[:len(argv)-1] {
			if argv[i] == "--root-dir" && argv[i+1] == rootDir {
				return pid, true
			}
		}
	}
	return 0, false
}

// monitorPids finds the container monitors of the agent serving rootDir:
// argv[0] is "minilet-monitor" and the environment names a directory under
// the root dir.
func monitorPids(rootDir string) []int {
	var out []int
	for _, pid := range pids() {
		argv := procArgv(pid)
		if len(argv) == 0 || argv[0] != "minilet-monitor" {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err == nil && bytes.Contains(env, []byte(rootDir)) {
			out = append(out, pid)
		}
	}
	return out
}

// cpuTicks returns utime+stime of pid in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields count from after ')'.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %v %v", pid, err1, err2)
	}
	return utime + stime, nil
}

// kbField returns a "Name:   123 kB" field of a /proc file in bytes.
func kbField(path, name string) (uint64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, name)
}

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

// BenchmarkNodeOverhead runs 100 idle pods and measures the agent's RSS
// and CPU and the monitors' summed PSS. Targets (issue 2): agent < 40 MiB
// and 0.02 cores; all monitors < 100 MiB.
func BenchmarkNodeOverhead(b *testing.B) {
	requireRootB(b)
	n := 100
	if v, err := strconv.Atoi(os.Getenv("MINILET_BENCH_PODS")); err == nil && v > 0 {
		n = v
	}
	window := 15 * time.Second
	if v, err := strconv.Atoi(os.Getenv("MINILET_OVERHEAD_SECONDS")); err == nil && v > 0 {
		window = time.Duration(v) * time.Second
	}
	a := startAgent(b)
	pid, ok := agentPid(a.RootDir)
	if !ok {
		b.Fatal("cannot find the agent's pid")
	}
	created := time.Now()
	for i := range n {
		name := fmt.Sprintf("idle%03d", i)
		a.WriteManifest(name+".yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers:
  - {name: main, image: host, command: ["sleep", "100000"]}
`, name))
	}
	harness.Eventually(b, fmt.Sprintf("%d pods Running", n), func() (bool, string) {
		running := 0
		for _, p := range a.Pods() {
			if podRunning(p) {
				running++
			}
		}
		return running == n, fmt.Sprintf("%d Running", running)
	})
	allRunning := time.Since(created)
	// Let start-up work (status writes, event flushes, GC of first
	// relists) settle before the window opens: this is a measurement
	// pause, not a wait for a condition.
	time.Sleep(5 * time.Second)
	b.ResetTimer()
	load0 := loadavg()
	t0, err := cpuTicks(pid)
	if err != nil {
		b.Fatal(err)
	}
	mons := monitorPids(a.RootDir)
	m0 := sumTicks(mons)
	start := time.Now()
	time.Sleep(window)
	t1, err := cpuTicks(pid)
	if err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start).Seconds()
	m1 := sumTicks(mons)
	b.StopTimer()

	agentCores := float64(t1-t0) / clockTicks / elapsed
	monCores := float64(m1-m0) / clockTicks / elapsed
	rss, err := kbField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	hwm, _ := kbField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM")
	agentPss, _ := kbField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss")
	// RssAnon is the agent's own memory; RssFile is mostly the binary's
	// text, shared with every monitor through the page cache.
	anon, _ := kbField(fmt.Sprintf("/proc/%d/status", pid), "RssAnon")
	file, _ := kbField(fmt.Sprintf("/proc/%d/status", pid), "RssFile")
	mons = monitorPids(a.RootDir)
	var pss, monRss uint64
	for _, m := range mons {
		p, err := kbField(fmt.Sprintf("/proc/%d/smaps_rollup", m), "Pss")
		if err != nil {
			b.Fatalf("monitor %d: %v", m, err)
		}
		pss += p
		r, _ := kbField(fmt.Sprintf("/proc/%d/status", m), "VmRSS")
		monRss += r
	}
	if len(mons) < n {
		b.Fatalf("found %d monitors for %d pods", len(mons), n)
	}
	b.ReportMetric(mib(rss), "agent-rss-MiB")
	b.ReportMetric(agentCores, "agent-cores")
	b.ReportMetric(mib(pss), "monitors-pss-MiB")
	b.ReportMetric(float64(len(mons)), "monitors")
	b.ReportMetric(allRunning.Seconds(), "all-running-s")
	b.Logf("%d pods Running %.1f s after their manifests were written", n, allRunning.Seconds())
	b.Logf("pods=%d window=%.1fs agent pid %d: RSS %.1f MiB (anon %.1f, file %.1f, peak %.1f, PSS %.1f), CPU %.4f cores; %d monitors: PSS %.1f MiB total (%.0f KiB each), RSS %.1f MiB total, CPU %.4f cores; load %s → %s",
		n, elapsed, pid, mib(rss), mib(anon), mib(file), mib(hwm), mib(agentPss), agentCores, len(mons), mib(pss), float64(pss)/1024/float64(len(mons)), mib(monRss), monCores, load0, loadavg())
}

// sumTicks sums utime+stime over pids, skipping those that are gone.
func sumTicks(pids []int) uint64 {
	var sum uint64
	for _, p := range pids {
		t, err := cpuTicks(p)
		if err == nil {
			sum += t
		}
	}
	return sum
}
