package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// BenchmarkDeviceAgentRestart restarts the agent (SIGTERM, then SIGKILL)
// under 50 pods that each hold one device of the example plugin, and
// measures the time from starting the new agent until all 50 are Running
// and Ready in /pods again, with no container restarted (term-ms,
// kill-ms), and until the node advertises the 50 devices again
// (term-devices-ms, kill-devices-ms).
func BenchmarkDeviceAgentRestart(b *testing.B) {
	if testing.Short() {
		b.Skip("whole-agent benchmark")
	}
	requireRootB(b)
	const n = 50
	a := startAgent(b)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("d%02d", i)
	}
	a.StartPlugin("example.com/dev", ids...)
	// The pods come once the plugin is there: a static pod read before
	// its plugin ever registered is rejected, as by the kubelet.
	for deadline := time.Now().Add(harness.Deadline); ; time.Sleep(10 * time.Millisecond) {
		nd := a.Node()
		if q := nd.Status.Allocatable["example.com/dev"]; q.Value() == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the plugin's %d devices never showed on the node", n)
		}
	}
	for i := 0; i < n; i++ {
		a.WriteManifest(fmt.Sprintf("dev%02d.yaml", i), fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: dev%02d}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sleep", "100000"]
    resources: {limits: {example.com/dev: 1}}
`, i))
	}
	before := waitAllReady(b, a, n, nil)
	for i := 0; i < b.N; i++ {
		for _, how := range []string{"term", "kill"} {
			if how == "kill" {
				a.Kill()
			} else {
				a.Stop()
			}
			t0 := time.Now()
			a.Start()
			devsAt := time.Duration(0)
			after := waitAllReady(b, a, n, func() {
				if devsAt == 0 {
					nd := a.Node()
					if q := nd.Status.Allocatable["example.com/dev"]; q.Value() == n {
						devsAt = time.Since(t0)
					}
				}
			})
			ready := time.Since(t0)
			if fmt.Sprint(after) != fmt.Sprint(before) {
				b.Fatalf("containers changed across the %s restart: %v, were %v", how, after, before)
			}
			for devsAt == 0 && time.Since(t0) < harness.Deadline {
				nd := a.Node()
				if q := nd.Status.Allocatable["example.com/dev"]; q.Value() == n {
					devsAt = time.Since(t0)
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.ReportMetric(ms(ready), how+"-ms")
			b.ReportMetric(ms(devsAt), how+"-devices-ms")
		}
	}
}

// waitAllReady polls /pods until n pods are Running and Ready with no
// container restart, calling each between polls, and returns pod →
// container ID. Container IDs must not change across a restart.
func waitAllReady(b *testing.B, a *harness.Agent, n int, each func()) map[string]string {
	b.Helper()
	deadline := time.Now().Add(2 * harness.Deadline)
	for {
		out := map[string]string{}
		var notYet []string
		for _, p := range a.Pods() {
			if !strings.HasPrefix(p.Name, "dev") {
				continue
			}
			if p.Status.Phase != v1.PodRunning || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
				notYet = append(notYet, p.Name+":"+string(p.Status.Phase))
				continue
			}
			c := p.Status.ContainerStatuses[0]
			if c.RestartCount != 0 {
				b.Fatalf("%s restarted its container %d times", p.Name, c.RestartCount)
			}
			out[p.Name] = c.ContainerID
		}
		if len(out) == n {
			return out
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d device pods Running and Ready; not yet: %v", len(out), n, notYet)
		}
		if each != nil {
			each()
		}
		time.Sleep(10 * time.Millisecond)
	}
}
