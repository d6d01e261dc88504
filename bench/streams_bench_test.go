package bench

// Streaming through the kubelet API (issue 14), measured in one run:
//
//   - exec round trip: `exec -- true` from opening the session to its exit
//     status, through minilet's HTTPS API (SPDY, the local admin's
//     certificate) on the embedded runtime and on containerd, beside the
//     same exec straight at containerd (CRI Exec, then SPDY to its
//     streaming server: what `crictl exec` does, without crictl's process
//     start). The three are interleaved, MINILET_BENCH_EXECS times each
//     (default 100); p50 and p99.
//   - port-forward: 100 MB read through minilet's port-forward from a
//     server in the pod, as a ratio to the same read over a direct
//     loopback connection (interleaved, 5 each).
//   - logs -f: a container writes 100 MB to stdout; MB/s that a follower
//     of /containerLogs receives from the first byte to the last.
//
// Needs root; the containerd parts need MINILET_CONTAINERD_ENDPOINT.

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy" //nolint:staticcheck // client-go v0.37 executors and dialers still take its types
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/internal/pki"
	"github.com/minilet/minilet/test/harness"
)

// streamPod starts a pod running sleep on image and returns its name and
// its container's runtime ID.
func streamPod(b *testing.B, a *harness.Agent, image, extra string) (string, string) {
	b.Helper()
	a.WriteManifest("sb.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: sb}
spec:
  hostNetwork: true
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["/bin/sh", "-c", "%s exec sleep 100000"]
`, image, extra))
	name := a.Static("sb")
	var id string
	harness.Eventually(b, "the bench pod running", func() (bool, string) {
		p, ok := a.Pod(name)
		if !ok || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			return false, fmt.Sprint(p.Status)
		}
		_, id, _ = strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
		return true, ""
	})
	return name, id
}

// execTrue runs `true` over SPDY at u with tlsConfig and returns the time.
func execTrue(b *testing.B, u *url.URL, tc *tls.Config) time.Duration {
	b.Helper()
	start := time.Now()
	rt, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{TLS: tc})
	if err != nil {
		b.Fatal(err)
	}
	ex, err := remotecommand.NewSPDYExecutorForTransports(rt, rt, http.MethodPost, u)
	if err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	if err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &out, Stderr: &out}); err != nil {
		b.Fatalf("exec true at %s: %v %s", u.Host, err, out.String())
	}
	return time.Since(start)
}

func agentExecURL(a *harness.Agent, pod string) *url.URL {
	u, _ := url.Parse(a.Addr + "/exec/default/" + pod + "/main?command=true&output=1&error=1")
	return u
}

func BenchmarkExecRoundTrip(b *testing.B) {
	requireRootB(b)
	n := 100
	if v, err := strconv.Atoi(os.Getenv("MINILET_BENCH_EXECS")); err == nil && v > 0 {
		n = v
	}
	emb := harness.New(b)
	emb.Start()
	embPod, _ := streamPod(b, emb, "host", "")
	embTLS, err := pki.ClientTLS(pki.Dir(emb.RootDir))
	if err != nil {
		b.Fatal(err)
	}
	series := map[string][]time.Duration{}
	run := []func(){func() {
		series["minilet-embedded"] = append(series["minilet-embedded"], execTrue(b, agentExecURL(emb, embPod), embTLS))
	}}

	if ep := os.Getenv("MINILET_CONTAINERD_ENDPOINT"); ep != "" {
		cd := harness.New(b)
		cd.UseContainerd()
		cd.Start()
		cdPod, cdID := streamPod(b, cd, harness.BusyboxImage, "")
		cdTLS, err := pki.ClientTLS(pki.Dir(cd.RootDir))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		rt, err := remote.New(ctx, remote.Config{Endpoint: ep})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rt.Close(ctx) })
		run = append(run,
			func() {
				series["minilet-containerd"] = append(series["minilet-containerd"], execTrue(b, agentExecURL(cd, cdPod), cdTLS))
			},
			func() {
				start := time.Now()
				resp, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: cdID, Cmd: []string{"true"}, Stdout: true, Stderr: true})
				if err != nil {
					b.Fatal(err)
				}
				u, _ := url.Parse(resp.Url)
				execTrue(b, u, nil)
				series["cri-direct-containerd"] = append(series["cri-direct-containerd"], time.Since(start))
			})
	}
	b.ResetTimer()
	for range n {
		for _, f := range run {
			f()
		}
	}
	b.StopTimer()
	for _, k := range []string{"minilet-embedded", "minilet-containerd", "cri-direct-containerd"} {
		ds := series[k]
		if len(ds) == 0 {
			continue
		}
		b.ReportMetric(ms(percentile(ds, 0.5)), k+"-p50-ms")
		b.ReportMetric(ms(percentile(ds, 0.99)), k+"-p99-ms")
	}
}

// BenchmarkPortForwardThroughput reads 100 MB from a server in a pod
// through `minilet port-forward` and straight over loopback.
func BenchmarkPortForwardThroughput(b *testing.B) {
	requireRootB(b)
	if _, err := os.Stat("/bin/busybox"); err != nil {
		b.Skip("needs /bin/busybox")
	}
	a := harness.New(b)
	a.Start()
	dir := a.RootDir + "/www"
	port := harness.FreePort(b)
	pod, _ := streamPod(b, a, "host", fmt.Sprintf("mkdir -p %[1]s && head -c 100000000 /dev/zero > %[1]s/blob && /bin/busybox httpd -p 127.0.0.1:%[2]d -h %[1]s &&", dir, port))
	local := harness.FreePort(b)
	pf := a.CLICommand("port-forward", pod, fmt.Sprintf("%d:%d", local, port))
	if err := pf.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	get := func(port int) time.Duration {
		start := time.Now()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/blob", port))
		if err != nil {
			return 0
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if n != 100_000_000 {
			return 0
		}
		return time.Since(start)
	}
	harness.Eventually(b, "port-forward serving", func() (bool, string) { return get(local) > 0, "" })
	var viaPF, direct []time.Duration
	b.ResetTimer()
	for range 5 {
		direct = append(direct, get(port))
		viaPF = append(viaPF, get(local))
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return 100 / d.Seconds() }
	p, d := percentile(viaPF, 0.5), percentile(direct, 0.5)
	b.ReportMetric(mbps(p), "port-forward-MB/s")
	b.ReportMetric(mbps(d), "loopback-MB/s")
	b.ReportMetric(float64(d)/float64(p), "ratio-to-loopback")
}

// BenchmarkLogsFollowThroughput follows a container that writes 100 MB.
func BenchmarkLogsFollowThroughput(b *testing.B) {
	requireRootB(b)
	a := harness.New(b)
	a.Start()
	a.WriteManifest("lb.yaml", `apiVersion: v1
kind: Pod
metadata: {name: lb}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: host
    command: ["/bin/sh", "-c", "sleep 2; head -c 100000000 /dev/zero | tr '\\0' 'x' | fold -w 999"]
`)
	name := a.Static("lb")
	harness.Eventually(b, "lb running", func() (bool, string) {
		p, ok := a.Pod(name)
		return ok && (p.Status.Phase == v1.PodRunning || p.Status.Phase == v1.PodSucceeded), fmt.Sprint(p.Status.Phase)
	})
	b.ResetTimer()
	cmd := a.CLICommand("logs", "-f", name)
	r, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(r, first); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	n, _ := io.Copy(io.Discard, r)
	d := time.Since(start)
	_ = cmd.Wait()
	b.StopTimer()
	n++
	if n < 100_000_000 {
		b.Fatalf("logs -f delivered %d bytes, want at least 100 MB", n)
	}
	b.ReportMetric(float64(n)/1e6/d.Seconds(), "logs-f-MB/s")
}
