package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/minilet/minilet/internal/errdefs"
)

// The read-only port serves what the kubelet's does, and never logs,
// events or the node's own details.
func TestReadOnlyServesOnlyTheKubeletsReadOnlyEndpoints(t *testing.T) {
	f := newFake(t)
	ts := httptest.NewServer(NewReadOnly(configFor(f)).Handler())
	defer ts.Close()
	for _, p := range []string{"/healthz", "/pods", "/metrics", "/metrics/resource", "/metrics/probes"} {
		if code, body := get(t, ts.URL+p); code != 200 {
			t.Errorf("%s: %d %s, want 200", p, code, body)
		}
	}
	for _, p := range []string{"/containerLogs/default/web-node1/nginx", "/events", "/node", "/devices", "/images", "/configz", "/runningpods/"} {
		if code, body := get(t, ts.URL+p); code != 404 || strings.Contains(body, "line one") {
			t.Errorf("%s on the read-only port: %d %s, want 404", p, code, body)
		}
	}
}

// No stream on the read-only port: exec, attach, run and port-forward, by
// either method and path form, are 404 and never reach the runtime, even
// with every provider (streams, node logs, profiling) configured; the
// full API routes the same requests to the runtime.
func TestReadOnlyNeverExecsAttachesOrForwards(t *testing.T) {
	cfg := configFor(newFake(t))
	trip := &tripwireStreamer{}
	cfg.Streams, cfg.NodeLogDir, cfg.Profiling = trip, t.TempDir(), true
	ro := httptest.NewServer(NewReadOnly(cfg).Handler())
	defer ro.Close()
	full := httptest.NewServer(New(cfg).Handler())
	defer full.Close()
	paths := []string{
		"/exec/default/web-node1/nginx?command=id&output=1",
		"/exec/default/web-node1/u1/nginx?command=id&output=1",
		"/attach/default/web-node1/nginx?output=1",
		"/attach/default/web-node1/u1/nginx?output=1",
		"/portForward/default/web-node1?port=80",
		"/portForward/default/web-node1/u1?port=80",
		"/run/default/web-node1/nginx?cmd=id",
		"/run/default/web-node1/u1/nginx?cmd=id",
	}
	for _, p := range paths {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			req, _ := http.NewRequest(m, ro.URL+p, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s %s on the read-only port: %d, want 404", m, p, resp.StatusCode)
			}
		}
	}
	for _, p := range []string{"/logs/", "/debug/pprof/", "/debug/pprof/cmdline"} {
		if code, _ := get(t, ro.URL+p); code != http.StatusNotFound {
			t.Errorf("%s on the read-only port: %d, want 404", p, code)
		}
	}
	if trip.calls != 0 {
		t.Fatalf("the read-only port reached the runtime's streams %d times", trip.calls)
	}
	// The same request on the full API reaches the runtime: the 404s
	// above are the port's, not a broken route.
	resp, err := http.Post(full.URL+"/run/default/web-node1/nginx?cmd=id", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if trip.calls != 1 {
		t.Errorf("/run on the full API: %d, %d runtime calls, want 1", resp.StatusCode, trip.calls)
	}
}

// tripwireStreamer counts every request that reaches the runtime.
type tripwireStreamer struct{ calls int }

func (s *tripwireStreamer) ExecURL(context.Context, *v1.Pod, string, []string, StreamOptions) (*url.URL, error) {
	s.calls++
	return nil, errdefs.ErrUnavailable
}

func (s *tripwireStreamer) AttachURL(context.Context, *v1.Pod, string, StreamOptions) (*url.URL, error) {
	s.calls++
	return nil, errdefs.ErrUnavailable
}

func (s *tripwireStreamer) PortForwardURL(context.Context, *v1.Pod, []int32) (*url.URL, error) {
	s.calls++
	return nil, errdefs.ErrUnavailable
}

func (s *tripwireStreamer) Run(context.Context, *v1.Pod, string, []string) ([]byte, error) {
	s.calls++
	return []byte("ran"), nil
}

// The full API is behind its guard: whatever it refuses never reaches a
// handler.
func TestFullAPIIsGuarded(t *testing.T) {
	cfg := configFor(newFake(t))
	cfg.Auth = guardFunc(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer yes" {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	ts := httptest.NewServer(New(cfg).Handler())
	defer ts.Close()
	if code, body := get(t, ts.URL+"/containerLogs/default/web-node1/nginx"); code != 401 || strings.Contains(body, "line") {
		t.Errorf("unauthenticated logs: %d %q", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/containerLogs/default/web-node1/nginx", nil)
	req.Header.Set("Authorization", "Bearer yes")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("authenticated logs: %d", resp.StatusCode)
	}
}

type guardFunc func(http.Handler) http.Handler

func (g guardFunc) Wrap(next http.Handler) http.Handler { return g(next) }

// /metrics/resource carries what metrics-server reads, in core-seconds
// and bytes, stamped with the statistics' time; /metrics/probes only the
// prober's families.
func TestResourceAndProbeMetrics(t *testing.T) {
	f := newFake(t)
	at := metav1.NewTime(time.Unix(1_800_000_000, 0))
	ns, ws := uint64(2_500_000_000), uint64(4096)
	start := metav1.NewTime(time.Unix(1_700_000_000, 0))
	f.summary = &statsapi.Summary{
		Node: statsapi.NodeStats{NodeName: "node1",
			CPU:    &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: &ns},
			Memory: &statsapi.MemoryStats{Time: at, WorkingSetBytes: &ws}},
		Pods: []statsapi.PodStats{{PodRef: statsapi.PodReference{Name: "web", Namespace: "default"},
			CPU: &statsapi.CPUStats{Time: at, UsageCoreNanoSeconds: &ns},
			Containers: []statsapi.ContainerStats{{Name: "nginx", StartTime: start,
				Memory: &statsapi.MemoryStats{Time: at, WorkingSetBytes: &ws}}}}},
	}
	cfg := configFor(f)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "prober_probe_total", Help: "x"}),
		prometheus.NewCounter(prometheus.CounterOpts{Name: "kubelet_other_total", Help: "x"}))
	cfg.Gatherer = reg
	ts := httptest.NewServer(New(cfg).Handler())
	defer ts.Close()
	_, body := get(t, ts.URL+"/metrics/resource")
	for _, want := range []string{
		"node_cpu_usage_seconds_total 2.5 1800000000000\n",
		"node_memory_working_set_bytes 4096 1800000000000\n",
		`pod_cpu_usage_seconds_total{namespace="default",pod="web"} 2.5 1800000000000` + "\n",
		`container_memory_working_set_bytes{container="nginx",namespace="default",pod="web"} 4096 1800000000000` + "\n",
		`container_start_time_seconds{container="nginx",namespace="default",pod="web"} 1.7e+09` + "\n",
		"scrape_error 0\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics/resource lacks %q:\n%s", want, body)
		}
	}
	_, body = get(t, ts.URL+"/metrics/probes")
	if !strings.Contains(body, "prober_probe_total") || strings.Contains(body, "kubelet_other_total") {
		t.Errorf("/metrics/probes:\n%s", body)
	}
	f.summary = nil
	if _, body = get(t, ts.URL+"/metrics/resource"); !strings.Contains(body, "scrape_error 1\n") {
		t.Errorf("/metrics/resource without stats:\n%s", body)
	}
}

func TestRunningPodsAndConfigz(t *testing.T) {
	f := newFake(t)
	cfg := configFor(f)
	cfg.Configz = map[string]any{"kind": "KubeletConfiguration", "maxPods": 3}
	ts := httptest.NewServer(New(cfg).Handler())
	defer ts.Close()
	if _, body := get(t, ts.URL+"/configz"); !strings.Contains(body, `{"kubeletconfig":{"kind":"KubeletConfiguration","maxPods":3}}`) {
		t.Errorf("/configz: %s", body)
	}
	f.pods[0].Status.ContainerStatuses = []v1.ContainerStatus{{Name: "nginx", Image: "nginx:1", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}
	if _, body := get(t, ts.URL+"/runningpods/"); !strings.Contains(body, `"containers":[{"name":"nginx","image":"nginx:1"`) {
		t.Errorf("/runningpods/: %s", body)
	}
}

// /logs/ serves the node's log directory on the full API only.
func TestNodeLogs(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir+"/syslog", "node line\n")
	cfg := configFor(newFake(t))
	cfg.NodeLogDir = dir
	full := httptest.NewServer(New(cfg).Handler())
	defer full.Close()
	if code, body := get(t, full.URL+"/logs/syslog"); code != 200 || body != "node line\n" {
		t.Errorf("/logs/syslog: %d %q", code, body)
	}
	if code, body := get(t, full.URL+"/logs/"); code != 200 || !strings.Contains(body, "syslog") {
		t.Errorf("/logs/ listing: %d %q", code, body)
	}
	if code, body := get(t, full.URL+"/logs/..%2f..%2fetc%2fpasswd"); code == 200 && strings.Contains(body, "root:") {
		t.Errorf("/logs/ left its directory: %q", body)
	}
	ro := httptest.NewServer(NewReadOnly(cfg).Handler())
	defer ro.Close()
	if code, _ := get(t, ro.URL+"/logs/syslog"); code != 404 {
		t.Errorf("/logs/ on the read-only port: %d, want 404", code)
	}
}

// Go's profiles are on the full API when enableProfilingHandler is on,
// never on the read-only port.
func TestProfilingHandler(t *testing.T) {
	cfg := configFor(newFake(t))
	cfg.Profiling = true
	full := httptest.NewServer(New(cfg).Handler())
	defer full.Close()
	if code, body := get(t, full.URL+"/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Errorf("heap profile: %d %.80q", code, body)
	}
	ro := httptest.NewServer(NewReadOnly(cfg).Handler())
	defer ro.Close()
	if code, _ := get(t, ro.URL+"/debug/pprof/heap"); code != 404 {
		t.Errorf("profiles on the read-only port: %d, want 404", code)
	}
	cfg.Profiling = false
	off := httptest.NewServer(New(cfg).Handler())
	defer off.Close()
	if code, _ := get(t, off.URL+"/debug/pprof/heap"); code != 404 {
		t.Errorf("profiles with enableProfilingHandler false: %d, want 404", code)
	}
}
