package kuberuntime

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestHTTPPreStopHook runs a preStop httpGet hook against a real local
// server (named port, custom header) and reports a failing one.
func TestHTTPPreStopHook(t *testing.T) {
	var hits atomic.Int32
	var header atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		header.Store(r.Header.Get("X-Reason"))
		if r.URL.Path != "/shutdown" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	for _, tc := range []struct {
		path   string
		failed bool
	}{{"/shutdown", false}, {"/broken", true}} {
		e := newEnv(t)
		pod := mkPod(v1.RestartPolicyAlways, nil, "a")
		c := &pod.Spec.Containers[0]
		c.Ports = []v1.ContainerPort{{Name: "admin", ContainerPort: int32(port)}}
		c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{
			Host: "127.0.0.1", Path: tc.path, Port: intstr.FromString("admin"),
			HTTPHeaders: []v1.HTTPHeader{{Name: "X-Reason", Value: "stop"}}}}}
		e.sync(pod)
		before := hits.Load()
		if err := e.m.KillPod(context.Background(), pod, e.status(pod).ps, nil); err != nil {
			t.Fatal(err)
		}
		if hits.Load() != before+1 || header.Load() != "stop" {
			t.Fatalf("%s: hook hits %d→%d header %v", tc.path, before, hits.Load(), header.Load())
		}
		if got := e.rec.has("Warning FailedPreStopHook"); got != tc.failed {
			t.Fatalf("%s: FailedPreStopHook event = %v, want %v:\n%s", tc.path, got, tc.failed, e.rec)
		}
	}
}
