package bench

// Probe benchmarks: the latency and CPU cost of one probe of each kind
// against loopback servers, and the sustained cost of 1,000 and 10,000
// probes (period 1 s, half HTTP, half TCP) run by the prober.Manager.
//
// For the sustained runs the HTTP and TCP servers run in a child process
// (this test binary re-executed), so that the agent's CPU (getrusage of
// this process) does not include the servers'. The window length is
// MINILET_PROBE_BENCH_SECONDS (default 10; the figure is 60).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/minilet/minilet/internal/container"
	"github.com/minilet/minilet/internal/prober"
	"github.com/minilet/minilet/internal/prober/probe"
	probeexec "github.com/minilet/minilet/internal/prober/probe/exec"
	probegrpc "github.com/minilet/minilet/internal/prober/probe/grpc"
	probehttp "github.com/minilet/minilet/internal/prober/probe/http"
	probetcp "github.com/minilet/minilet/internal/prober/probe/tcp"
)

const probeBenchServerEnv = "MINILET_PROBE_BENCH_SERVER"

// probeBenchHostExecer runs commands on the host with os/exec, which is
// what the embedded runtime's ExecSync does.
type probeBenchHostExecer struct{}

func (probeBenchHostExecer) ExecSync(ctx context.Context, _ container.ID, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := osexec.CommandContext(ctx, cmd[0], cmd[1:]...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ctx.Err() != nil {
		return nil, nil, -1, ctx.Err()
	}
	var exitErr *osexec.ExitError
	if errors.As(err, &exitErr) {
		return out.Bytes(), errb.Bytes(), int32(exitErr.ExitCode()), nil
	}
	return out.Bytes(), errb.Bytes(), 0, err
}

// probeBenchCPU is user+system CPU of this process and its waited-for
// children.
func probeBenchCPU() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

func probeBenchPercentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func probeBenchListen(b *testing.B) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkProbeLatency runs one probe after another against a loopback
// server and reports p50/p99 latency and CPU per probe.
func BenchmarkProbeLatency(b *testing.B) {
	hl := probeBenchListen(b)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = hs.Serve(hl) }()
	b.Cleanup(func() { _ = hs.Close() })
	httpPort := hl.Addr().(*net.TCPAddr).Port

	tl := probeBenchListen(b)
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	b.Cleanup(func() { _ = tl.Close() })

	gl := probeBenchListen(b)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(gl) }()
	b.Cleanup(gs.Stop)

	hp := probehttp.New()
	c := &v1.Container{Name: "app"}
	req, err := probehttp.NewRequest(&v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(httpPort))}, c, "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	kinds := []struct {
		name string
		run  func() (probe.Result, string, error)
	}{
		{"http", func() (probe.Result, string, error) { return hp.Probe(ctx, req, 5*time.Second) }},
		{"tcp", func() (probe.Result, string, error) {
			return probetcp.Probe(ctx, "127.0.0.1", tl.Addr().(*net.TCPAddr).Port, 5*time.Second)
		}},
		{"grpc", func() (probe.Result, string, error) {
			return probegrpc.Probe(ctx, "127.0.0.1", gl.Addr().(*net.TCPAddr).Port, "", 5*time.Second)
		}},
		{"exec", func() (probe.Result, string, error) {
			return probeexec.Probe(ctx, probeBenchHostExecer{}, container.ID{Type: "bench", ID: "c"}, []string{"true"}, 5*time.Second)
		}},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			cpu0 := probeBenchCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				r, out, err := k.run()
				lat = append(lat, time.Since(start))
				if err != nil || r != probe.Success {
					b.Fatalf("%s probe: %v %q %v", k.name, r, out, err)
				}
			}
			b.StopTimer()
			cpu := probeBenchCPU() - cpu0
			b.ReportMetric(float64(probeBenchPercentile(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(probeBenchPercentile(lat, 0.99).Microseconds()), "p99-µs")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/probe")
		})
	}
}

// BenchmarkProbeServerProcess is not a benchmark: it is the server side of
// BenchmarkSustainedProbes, run in a child process. It serves HTTP and TCP
// on loopback, prints their ports, and exits when stdin closes.
func BenchmarkProbeServerProcess(b *testing.B) {
	if os.Getenv(probeBenchServerEnv) == "" {
		b.Skip("only run as the child of BenchmarkSustainedProbes")
	}
	hl := probeBenchListen(b)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = hs.Serve(hl) }()
	tl := probeBenchListen(b)
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	fmt.Printf("PORTS %d %d\n", hl.Addr().(*net.TCPAddr).Port, tl.Addr().(*net.TCPAddr).Port)
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = hs.Close()
	_ = tl.Close()
}

// probeBenchNoopExecer answers every exec at once with exit 0: a stand-in
// for the container so that only the prober's own work is measured.
type probeBenchNoopExecer struct{}

func (probeBenchNoopExecer) ExecSync(context.Context, container.ID, []string, time.Duration) ([]byte, []byte, int32, error) {
	return nil, nil, 0, nil
}

// probeBenchStatus reports every pod as running with one container.
type probeBenchStatus struct{ status v1.PodStatus }

func (s *probeBenchStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) { return s.status, true }

type probeBenchResult struct {
	perSec, cores, rssMiB float64
	p50, p99              time.Duration
	failures, timeWait    int
}

var (
	probeBenchMu    sync.Mutex
	probeBenchCache = map[string]probeBenchResult{}
)

// BenchmarkSustainedProbes runs N readiness probes (period 1 s, even pods
// HTTP, odd pods TCP) for a window and reports probes/s, agent CPU in
// cores, RSS, and lateness against the schedule (p50, p99). The
// engine-only run uses exec probes with an Execer that answers at once, to
// show the scheduler's own cost without the kernel's TCP work. Each run is
// done once and its figures reused for repeated b.N rounds.
func BenchmarkSustainedProbes(b *testing.B) {
	if os.Getenv(probeBenchServerEnv) != "" {
		b.Skip("server process")
	}
	for _, run := range []struct {
		name   string
		n      int
		engine bool
	}{{"1000", 1000, false}, {"10000", 10000, false}, {"10000-engine-only", 10000, true}} {
		b.Run(run.name, func(b *testing.B) {
			probeBenchMu.Lock()
			res, ok := probeBenchCache[run.name]
			probeBenchMu.Unlock()
			if !ok {
				res = probeBenchSustained(b, run.n, run.engine)
				probeBenchMu.Lock()
				probeBenchCache[run.name] = res
				probeBenchMu.Unlock()
			}
			b.ReportMetric(res.perSec, "probes/s")
			b.ReportMetric(res.cores, "cores")
			b.ReportMetric(res.rssMiB, "rss-MiB")
			b.ReportMetric(float64(res.p50.Microseconds()), "late-p50-µs")
			b.ReportMetric(float64(res.p99.Microseconds()), "late-p99-µs")
			b.ReportMetric(float64(res.failures), "failed")
			b.ReportMetric(float64(res.timeWait), "time-wait-sockets")
		})
	}
}

func probeBenchSustained(b *testing.B, n int, engineOnly bool) probeBenchResult {
	window := 10 * time.Second
	if s, err := strconv.Atoi(os.Getenv("MINILET_PROBE_BENCH_SECONDS")); err == nil && s > 0 {
		window = time.Duration(s) * time.Second
	}
	child := osexec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkProbeServerProcess$", "-test.benchtime=1x")
	child.Env = append(os.Environ(), probeBenchServerEnv+"=1")
	stdin, err := child.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = child.Wait() }()
	var httpPort, tcpPort int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "PORTS %d %d", &httpPort, &tcpPort); err == nil {
			break
		}
	}
	if httpPort == 0 {
		b.Fatal("the server process printed no ports")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	timeWait0 := probeBenchTimeWait()
	var (
		mu       sync.Mutex
		lateness []time.Duration
		counting bool
	)
	st := &probeBenchStatus{status: v1.PodStatus{Phase: v1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []v1.ContainerStatus{{
		Name: "app", ContainerID: "cid",
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-time.Hour))}},
	}}}}
	m, err := prober.NewManager(prober.Config{
		Status: st,
		Execer: probeBenchNoopExecer{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ObserveLateness: func(d time.Duration) {
			mu.Lock()
			if counting {
				lateness = append(lateness, d)
			}
			mu.Unlock()
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var failures int
	var fmu sync.Mutex
	go func() {
		for {
			select {
			case u := <-m.Updates():
				if u.Result == prober.Failure && !strings.HasPrefix(string(u.PodUID), "warm") {
					fmu.Lock()
					failures++
					fmu.Unlock()
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	m.Start(ctx)
	defer m.Stop()
	for i := 0; i < n; i++ {
		h := v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(tcpPort))}}
		if engineOnly {
			h = v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}
		} else if i%2 == 0 {
			h = v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(httpPort))}}
		}
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "bench", UID: types.UID(fmt.Sprintf("pod-%d", i))},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", ReadinessProbe: &v1.Probe{
				PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1, ProbeHandler: h,
			}}}},
		}
		if err := m.AddPod(pod); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second) // warm-up: the first probes are spread over the first period
	fmu.Lock()
	failures = 0
	fmu.Unlock()
	mu.Lock()
	counting = true
	mu.Unlock()
	cpu0, t0 := probeBenchCPU(), time.Now()
	time.Sleep(window)
	mu.Lock()
	counting = false
	count := len(lateness)
	mu.Unlock()
	elapsed, cpu := time.Since(t0), probeBenchCPU()-cpu0
	fmu.Lock()
	defer fmu.Unlock()
	return probeBenchResult{
		perSec:   float64(count) / elapsed.Seconds(),
		cores:    cpu.Seconds() / elapsed.Seconds(),
		rssMiB:   probeBenchRSS(),
		p50:      probeBenchPercentile(lateness, 0.5),
		p99:      probeBenchPercentile(lateness, 0.99),
		failures: failures,
		timeWait: probeBenchTimeWait() - timeWait0,
	}
}

// probeBenchTimeWait counts TIME_WAIT TCP sockets in this network
// namespace (both the prober's and the servers' side; other processes'
// too, so the benchmark reports the growth during its run).
func probeBenchTimeWait() int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if fields := strings.Fields(line); len(fields) > 3 && fields[3] == "06" {
				n++
			}
		}
	}
	return n
}

// probeBenchRSS is this process's resident set in MiB.
func probeBenchRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
