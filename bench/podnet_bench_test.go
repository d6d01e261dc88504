package bench

// Pod networking (issue 17):
//
//   - BenchmarkPodStartNetwork: the same pod (one `sleep` container, off
//     the host network, so with its own network namespace attached by
//     CNI through the same conflist and plugins) started through two
//     agents, one on the embedded runtime (image host) and one on
//     containerd (busybox), interleaved pod by pod: manifest written →
//     GET /pods shows it Running with a pod IP. Goal: embedded p99 ≤ half
//     of containerd's. Needs MINILET_CONTAINERD_ENDPOINT.
//   - BenchmarkCNIAdd: the CNI part alone, in process: a pod's namespaces
//     made and attached (loopback + bridge + portmap ADD), then detached
//     and released.
//   - BenchmarkPodNetworkChurn: 200 pods (MINILET_BENCH_PODS) with host
//     ports created and deleted through one embedded agent, then a leak
//     check: veths on the bridge, IPs reserved, iptables rules, held
//     namespaces must all be back where they were.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cri/embedded/podnet"
	"github.com/minilet/minilet/internal/cri/embedded/podnet/podnettest"
	"github.com/minilet/minilet/internal/cri/embedded/podns"
	"github.com/minilet/minilet/test/harness"
)

func benchPods(def int) int {
	if v, err := strconv.Atoi(os.Getenv("MINILET_BENCH_PODS")); err == nil && v > 0 {
		return v
	}
	return def
}

func BenchmarkPodStartNetwork(b *testing.B) {
	requireRootB(b)
	harness.ContainerdEndpoint(b) // skips without containerd
	n := benchPods(20)
	emb := startAgent(b)
	cd := harness.New(b)
	cd.UseContainerd()
	cd.ExtraArgs = append(cd.ExtraArgs, "--log-level", "info")
	cd.Start()

	var embedded, containerd []time.Duration
	b.ResetTimer()
	for i := range n {
		embedded = append(embedded, netBenchStart(b, emb, fmt.Sprintf("netemb%03d", i), "host"))
		containerd = append(containerd, netBenchStart(b, cd, fmt.Sprintf("netcd%03d", i), harness.BusyboxImage))
	}
	b.StopTimer()
	e50, e99 := percentile(embedded, 0.5), percentile(embedded, 0.99)
	c50, c99 := percentile(containerd, 0.5), percentile(containerd, 0.99)
	b.ReportMetric(ms(e50), "embedded-p50-ms")
	b.ReportMetric(ms(e99), "embedded-p99-ms")
	b.ReportMetric(ms(c50), "containerd-p50-ms")
	b.ReportMetric(ms(c99), "containerd-p99-ms")
	b.ReportMetric(float64(e99)/float64(c99), "ratio-p99")
	b.Logf("%d pods each, interleaved: embedded p50 %.1f p99 %.1f ms; containerd p50 %.1f p99 %.1f ms; p99 ratio %.2f (goal ≤ 0.5); load %s",
		n, ms(e50), ms(e99), ms(c50), ms(c99), float64(e99)/float64(c99), loadavg())
}

// netBenchStart starts one networked pod through a and returns manifest →
// Running with a pod IP; the pod is gone again before it returns.
func netBenchStart(b *testing.B, a *harness.Agent, name, image string) time.Duration {
	b.Helper()
	static := a.Static(name)
	start := time.Now()
	a.WriteManifest(name+".yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, imagePullPolicy: IfNotPresent, command: ["sleep", "100000"]}
`, name, image))
	cdBenchWait(b, static+" Running with a pod IP", func() bool {
		p, ok := a.Pod(static)
		return ok && podRunning(p) && p.Status.PodIP != ""
	})
	took := time.Since(start)
	b.StopTimer()
	a.RemoveManifest(name + ".yaml")
	cdBenchWait(b, static+" gone", func() bool {
		_, ok := a.Pod(static)
		return !ok
	})
	b.StartTimer()
	return took
}

func BenchmarkCNIAdd(b *testing.B) {
	requireRootB(b)
	n := benchPods(30)
	net, err := podnet.New(podnet.Config{ConfDir: b.TempDir(), BinDirs: []string{podnettest.BinDir(b)}, CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	root := b.TempDir()
	var adds, dels []time.Duration
	b.ResetTimer()
	for i := range n {
		id := fmt.Sprintf("cnibench%d%d", os.Getpid(), i)
		dir := filepath.Join(root, id)
		start := time.Now()
		paths, err := podns.Create(dir, []podns.Kind{podns.Net, podns.UTS, podns.IPC}, "bench")
		if err != nil {
			b.Fatal(err)
		}
		pod := podnet.Pod{SandboxID: id, Name: id, Namespace: "bench", UID: id, NetNS: paths[podns.Net],
			Ports: []podnet.PortMapping{{HostPort: int32(20000 + i), ContainerPort: 80, Protocol: "tcp"}}}
		if _, err := net.Attach(ctx, pod); err != nil {
			b.Fatal(err)
		}
		adds = append(adds, time.Since(start))
		start = time.Now()
		if err := net.Detach(ctx, pod, ""); err != nil {
			b.Fatal(err)
		}
		if err := podns.Remove(dir); err != nil {
			b.Fatal(err)
		}
		dels = append(dels, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(adds, 0.5)), "add-p50-ms")
	b.ReportMetric(ms(percentile(adds, 0.99)), "add-p99-ms")
	b.ReportMetric(ms(percentile(dels, 0.5)), "del-p50-ms")
	b.Logf("%d pods: namespaces + CNI ADD (loopback, bridge, portmap) p50 %.1f p99 %.1f ms; DEL + release p50 %.1f ms; load %s",
		n, ms(percentile(adds, 0.5)), ms(percentile(adds, 0.99)), ms(percentile(dels, 0.5)), loadavg())
}

func BenchmarkPodNetworkChurn(b *testing.B) {
	requireRootB(b)
	n := benchPods(200)
	a := startAgent(b)
	vethsBefore, rulesBefore := bridgeVeths(b), iptablesLines(b)
	b.ResetTimer()
	start := time.Now()
	const wave = 50
	for first := 0; first < n; first += wave {
		last := min(first+wave, n)
		for i := first; i < last; i++ {
			a.WriteManifest(fmt.Sprintf("churn%03d.yaml", i), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: churn%03d}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sleep", "100000"]
    ports: [{containerPort: 80, hostPort: %d}]
`, i, 21000+i))
		}
		waitFor(b, "a wave Running", 10*time.Millisecond, func() bool {
			running := 0
			for _, p := range a.Pods() {
				if podRunning(p) && p.Status.PodIP != "" {
					running++
				}
			}
			return running == last-first
		})
		for i := first; i < last; i++ {
			a.RemoveManifest(fmt.Sprintf("churn%03d.yaml", i))
		}
		waitFor(b, "a wave gone", 10*time.Millisecond, func() bool { return len(a.Pods()) == 0 })
	}
	took := time.Since(start)
	b.StopTimer()
	// What DEL releases, and the held namespaces, must be back.
	var vethsAfter, rulesAfter int
	waitFor(b, "network state released", 100*time.Millisecond, func() bool {
		vethsAfter, rulesAfter = bridgeVeths(b), iptablesLines(b)
		left, _ := os.ReadDir(filepath.Join(a.RootDir, "runtime", "netns"))
		return vethsAfter <= vethsBefore && rulesAfter <= rulesBefore && len(left) == 0
	})
	b.ReportMetric(took.Seconds(), "churn-s")
	b.ReportMetric(float64(vethsAfter-vethsBefore), "leaked-veths")
	b.ReportMetric(float64(rulesAfter-rulesBefore), "leaked-rules")
	b.Logf("%d pods with host ports created and deleted in waves of %d in %.1f s: veths on the bridge %d → %d, iptables lines %d → %d; load %s",
		n, wave, took.Seconds(), vethsBefore, vethsAfter, rulesBefore, rulesAfter, loadavg())
}

// bridgeVeths counts the interfaces attached to the default bridge.
func bridgeVeths(b *testing.B) int {
	out, err := exec.Command("ip", "-o", "link", "show", "master", "minilet0").Output()
	if err != nil {
		return 0 // no bridge yet
	}
	return strings.Count(string(out), "\n")
}

func iptablesLines(b *testing.B) int {
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		b.Fatalf("iptables-save: %v", err)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A") {
			n++
		}
	}
	return n
}
