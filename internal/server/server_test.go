package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/minilet/minilet/internal/errdefs"
)

// fakeAgent is the data the providers hand out; the server under test is
// real (real HTTP, real log files).
type fakeAgent struct {
	pods     []v1.Pod
	node     *v1.Node
	events   []v1.Event
	logDir   string
	summary  *statsapi.Summary
	devices  []Device
	images   []Image
	failWith error
}

func (f *fakeAgent) Pods() []v1.Pod    { return f.pods }
func (f *fakeAgent) Node() *v1.Node    { return f.node }
func (f *fakeAgent) Devices() []Device { return f.devices }

func (f *fakeAgent) Events(ns, name string) ([]v1.Event, error) {
	if f.failWith != nil {
		return nil, f.failWith
	}
	var out []v1.Event
	for _, e := range f.events {
		if ns == "" || (e.InvolvedObject.Namespace == ns && e.InvolvedObject.Name == name) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeAgent) ContainerLogPath(ns, pod, ctr string, previous bool) (string, error) {
	for _, p := range f.pods {
		if p.Namespace != ns || p.Name != pod {
			continue
		}
		for _, c := range p.Spec.Containers {
			if c.Name == ctr {
				n := "1.log"
				if previous {
					n = "0.log"
				}
				return filepath.Join(f.logDir, ns+"_"+pod, ctr, n), nil
			}
		}
		return "", fmt.Errorf("container %q in pod %s/%s: %w", ctr, ns, pod, errdefs.ErrNotFound)
	}
	return "", fmt.Errorf("pod %s/%s: %w", ns, pod, errdefs.ErrNotFound)
}

func (f *fakeAgent) Summary(context.Context) (*statsapi.Summary, error) {
	if f.summary == nil {
		return nil, fmt.Errorf("no stats collected yet: %w", errdefs.ErrUnavailable)
	}
	return f.summary, nil
}

func (f *fakeAgent) Images(context.Context) ([]Image, error) { return f.images, nil }

func newFake(t *testing.T) *fakeAgent {
	t.Helper()
	f := &fakeAgent{logDir: t.TempDir()}
	f.pods = []v1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "web-node1", Namespace: "default", UID: "u1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "nginx"}}},
		Status:     v1.PodStatus{Phase: v1.PodRunning},
	}}
	f.node = &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1"},
		Status: v1.NodeStatus{Capacity: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("2"), "example.com/gpu": resource.MustParse("4"),
		}},
	}
	f.events = []v1.Event{
		{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "default"}, Reason: "Started",
			InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-node1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "e2", Namespace: "default"}, Reason: "NodeReady",
			InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "node1"}},
	}
	dir := filepath.Join(f.logDir, "default_web-node1", "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeLog(t, filepath.Join(dir, "0.log"), "2026-11-22T05:00:00.000000001Z stdout F previous run\n")
	writeLog(t, filepath.Join(dir, "1.log"),
		"2026-11-22T05:00:01.000000001Z stdout F line one\n2026-11-22T05:00:02.000000001Z stderr F line two\n")
	return f
}

func writeLog(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func configFor(f *fakeAgent) Config {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubelet_running_pods", Help: "x"})
	g.Set(1)
	reg.MustRegister(g)
	return Config{Pods: f, Node: f, Events: f, Logs: f, Stats: f, Devices: f, Images: f,
		Gatherer: reg, LogPollInterval: 20 * time.Millisecond}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	// The timeout only turns a hang (a stream that never ends) into a
	// failure; no request here should come near it.
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	f := newFake(t)
	ts := httptest.NewServer(New(configFor(f)).Handler())
	defer ts.Close()

	tests := []struct {
		path     string
		code     int
		contains []string
	}{
		{"/healthz", 200, []string{"ok"}},
		{"/pods", 200, []string{`"kind":"PodList"`, `"apiVersion":"v1"`, `"name":"web-node1"`, `"phase":"Running"`}},
		{"/node", 200, []string{`"kind":"Node"`, `"example.com/gpu":"4"`}},
		{"/events", 200, []string{`"kind":"EventList"`, `"Started"`, `"NodeReady"`}},
		{"/events?pod=default/web-node1", 200, []string{`"Started"`}},
		{"/events?pod=nonamespace", 400, []string{`"kind":"Status"`, `"reason":"BadRequest"`, `pod=\"nonamespace\"`}},
		{"/containerLogs/default/web-node1/nginx", 200, []string{"line one\nline two\n"}},
		{"/containerLogs/default/web-node1/nginx?tailLines=1&timestamps=true", 200, []string{"2026-11-22T05:00:02.000000001Z line two\n"}},
		{"/containerLogs/default/web-node1/nginx?previous=true", 200, []string{"previous run\n"}},
		{"/containerLogs/default/web-node1/nginx?limitBytes=4", 200, []string{"line"}},
		{"/containerLogs/default/web-node1/nginx?sinceTime=2026-11-22T05:00:02Z", 200, []string{"line two\n"}},
		{"/containerLogs/default/web-node1/nope", 404, []string{`"code":404`, `container \"nope\" in pod default/web-node1`}},
		{"/containerLogs/default/ghost/nginx", 404, []string{`pod default/ghost`}},
		{"/containerLogs/default/web-node1/nginx?tailLines=-1", 400, []string{"tailLines"}},
		{"/containerLogs/default/web-node1/nginx?follow=maybe", 400, []string{"follow"}},
		{"/containerLogs/default/web-node1/nginx?sinceSeconds=5&sinceTime=2026-11-22T05:00:02Z", 400, []string{"exclusive"}},
		{"/stats/summary", 503, []string{`"reason":"ServiceUnavailable"`, "no stats collected yet"}},
		{"/devices", 200, []string{`"items":[]`}},
		{"/images", 200, []string{`"items":[]`}},
		{"/metrics", 200, []string{"kubelet_running_pods 1"}},
		{"/nope", 404, []string{`"kind":"Status"`}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body := get(t, ts.URL+tt.path)
			if code != tt.code {
				t.Errorf("code %d, want %d; body %s", code, tt.code, body)
			}
			for _, c := range tt.contains {
				if !strings.Contains(body, c) {
					t.Errorf("body %q does not contain %q", body, c)
				}
			}
		})
	}
	// limitBytes must cut exactly.
	if _, body := get(t, ts.URL+"/containerLogs/default/web-node1/nginx?limitBytes=4"); body != "line" {
		t.Errorf("limitBytes=4 gave %q", body)
	}
}

func TestSummaryAndDevicesWithData(t *testing.T) {
	f := newFake(t)
	cores := uint64(250_000_000)
	f.summary = &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "node1"},
		Pods: []statsapi.PodStats{{PodRef: statsapi.PodReference{Name: "web-node1", Namespace: "default"},
			CPU: &statsapi.CPUStats{UsageNanoCores: &cores}}}}
	f.devices = []Device{{Resource: "b.com/x", ID: "2", Health: "Healthy"}, {Resource: "a.com/y", ID: "1", Health: "Unhealthy"}}
	ts := httptest.NewServer(New(configFor(f)).Handler())
	defer ts.Close()

	_, body := get(t, ts.URL+"/stats/summary")
	var sum statsapi.Summary
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Node.NodeName != "node1" || len(sum.Pods) != 1 || *sum.Pods[0].CPU.UsageNanoCores != cores {
		t.Errorf("summary round trip: %+v", sum)
	}
	_, body = get(t, ts.URL+"/devices")
	var dl DeviceList
	if err := json.Unmarshal([]byte(body), &dl); err != nil {
		t.Fatal(err)
	}
	if len(dl.Items) != 2 || dl.Items[0].Resource != "a.com/y" {
		t.Errorf("devices not sorted by resource: %+v", dl.Items)
	}
}

func TestNilProvidersAreNotEnabled(t *testing.T) {
	ts := httptest.NewServer(New(Config{}).Handler())
	defer ts.Close()
	for _, p := range []string{"/pods", "/node", "/events", "/containerLogs/a/b/c", "/stats/summary", "/devices", "/images", "/metrics"} {
		code, body := get(t, ts.URL+p)
		if code != 404 || !strings.Contains(body, "not enabled") {
			t.Errorf("%s: %d %s", p, code, body)
		}
	}
	if code, body := get(t, ts.URL+"/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}

func TestErrorClassification(t *testing.T) {
	f := newFake(t)
	for _, tt := range []struct {
		err  error
		code int
	}{
		{errdefs.ErrNotFound, 404},
		{errdefs.ErrInvalidArgument, 400},
		{errdefs.ErrUnavailable, 503},
		{errdefs.ErrConflict, 409},
		{fmt.Errorf("disk on fire"), 500},
	} {
		f.failWith = fmt.Errorf("store: %w", tt.err)
		ts := httptest.NewServer(New(configFor(f)).Handler())
		code, body := get(t, ts.URL+"/events")
		ts.Close()
		var st metav1.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("body is not a Status: %v: %s", err, body)
		}
		if code != tt.code || int(st.Code) != tt.code || !strings.Contains(st.Message, "store") {
			t.Errorf("%v: got %d %+v, want %d", tt.err, code, st, tt.code)
		}
	}
}

// TestServeFollowAndGracefulShutdown runs the real Serve on a loopback
// port, follows a log while a writer appends, then cancels the context:
// Serve must end the stream and return nil.
func TestServeFollowAndGracefulShutdown(t *testing.T) {
	f := newFake(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- New(configFor(f)).Serve(ctx, ln) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/containerLogs/default/web-node1/nginx?follow=true&tailLines=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	readLine := func(want string) {
		t.Helper()
		got, err := r.ReadString('\n')
		if err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	readLine("line two\n")
	writeLog(t, filepath.Join(f.logDir, "default_web-node1", "nginx", "1.log"), "2026-11-22T05:00:03.000000001Z stdout F appended\n")
	readLine("appended\n")

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve returned %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	// The stream ends with the server.
	if _, err := io.ReadAll(r); err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Logf("stream ended with %v", err)
	}
}

// stopped reports every container as not running.
type stopped struct{}

func (stopped) ContainerRunning(string, string, string) bool { return false }

func TestFollowOfStoppedContainerEnds(t *testing.T) {
	f := newFake(t)
	cfg := configFor(f)
	cfg.Running = stopped{}
	ts := httptest.NewServer(New(cfg).Handler())
	defer ts.Close()
	// Without the checker this request would stream until the client left;
	// here it must end with the file's content.
	for _, q := range []string{"follow=true", "follow=true&previous=true"} {
		code, body := get(t, ts.URL+"/containerLogs/default/web-node1/nginx?"+q)
		if code != 200 || !strings.HasSuffix(body, "\n") || body == "" {
			t.Errorf("%s: %d %q", q, code, body)
		}
	}
}

func TestAddrFileRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	if _, err := ReadAddrFile(dir); !errdefs.IsNotFound(err) {
		t.Fatalf("missing file: %v, want ErrNotFound", err)
	}
	if err := WriteAddrFile(dir, "127.0.0.1:4321"); err != nil {
		t.Fatal(err)
	}
	u, err := ReadAddrFile(dir)
	if err != nil || u != "https://127.0.0.1:4321" {
		t.Fatalf("got %q, %v", u, err)
	}
	// The file itself holds host:port, which scripts prefix themselves.
	if b, err := os.ReadFile(filepath.Join(dir, AddrFileName)); err != nil || string(b) != "127.0.0.1:4321\n" {
		t.Fatalf("file content %q, %v", b, err)
	}
	for in, want := range map[string]string{
		"0.0.0.0:10250": "https://127.0.0.1:10250",
		"[::]:10250":    "https://[::1]:10250",
		":10250":        "https://127.0.0.1:10250",
		"10.1.2.3:80":   "https://10.1.2.3:80",
	} {
		if err := WriteAddrFile(dir, in); err != nil {
			t.Fatal(err)
		}
		if u, err := ReadAddrFile(dir); err != nil || u != want {
			t.Errorf("listen address %s recorded as %q (%v), want %q", in, u, err, want)
		}
	}
	if err := WriteAddrFile(dir, ""); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("empty address: %v", err)
	}
}

// running reports every container as running.
type running struct{}

func (running) ContainerRunning(string, string, string) bool { return true }

// restartingLogs is fakeAgent whose container restarts on demand: from then
// on its current log is 2.log.
type restartingLogs struct {
	*fakeAgent
	restarted atomic.Bool
}

func (r *restartingLogs) ContainerLogPath(ns, pod, ctr string, previous bool) (string, error) {
	p, err := r.fakeAgent.ContainerLogPath(ns, pod, ctr, previous)
	if err == nil && !previous && r.restarted.Load() {
		p = filepath.Join(filepath.Dir(p), "2.log")
	}
	return p, err
}

// A followed log ends when the container restarts (the running container
// is another instance, writing another file) instead of waiting forever on
// the old file.
func TestFollowEndsWhenContainerRestarts(t *testing.T) {
	f := newFake(t)
	logs := &restartingLogs{fakeAgent: f}
	cfg := configFor(f)
	cfg.Logs, cfg.Running = logs, running{}
	ts := httptest.NewServer(New(cfg).Handler())
	defer ts.Close()

	c := &http.Client{Timeout: 30 * time.Second} // turns a hang into a failure
	resp, err := c.Get(ts.URL + "/containerLogs/default/web-node1/nginx?follow=true&tailLines=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if got, err := r.ReadString('\n'); err != nil || got != "line two\n" {
		t.Fatalf("read %q, %v", got, err)
	}
	writeLog(t, filepath.Join(f.logDir, "default_web-node1", "nginx", "2.log"), "2026-11-22T05:00:09.000000001Z stdout F new instance\n")
	logs.restarted.Store(true)
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("the stream did not end cleanly after the restart: %v", err)
	}
	if strings.Contains(string(rest), "new instance") {
		t.Errorf("the old instance's stream printed the new instance's log: %q", rest)
	}
}

// A stuck sync loop fails /healthz on both servers, as the kubelet's does,
// without telling an unauthenticated caller why.
func TestHealthzFailsWhileTheSyncLoopIsStuck(t *testing.T) {
	var stuck error
	cfg := Config{Healthy: func() error { return stuck }}
	for name, h := range map[string]http.Handler{"kubelet API": New(cfg).Handler(), "read-only": NewReadOnly(cfg).Handler()} {
		ts := httptest.NewServer(h)
		stuck = nil
		if code, body := get(t, ts.URL+"/healthz"); code != 200 || body != "ok" {
			t.Errorf("%s healthy: %d %q", name, code, body)
		}
		stuck = errors.New("sync loop took longer than expected")
		code, body := get(t, ts.URL+"/healthz")
		if code != 500 || !strings.Contains(body, "[-]syncloop failed: reason withheld") || strings.Contains(body, "longer") {
			t.Errorf("%s stuck: %d %q", name, code, body)
		}
		ts.Close()
	}
}
