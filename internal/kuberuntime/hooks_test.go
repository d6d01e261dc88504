package kuberuntime

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestHTTPPreStopHook runs a preStop httpGet hook against a real local
// server (named port, custom header, a path with a query, as the upstream
// lifecycle specs use) and reports a failing one.
func TestHTTPPreStopHook(t *testing.T) {
	var hits atomic.Int32
	var header atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		header.Store(r.Header.Get("X-Reason"))
		if r.URL.Path != "/shutdown" || r.URL.Query().Get("msg") != "prestop" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	for _, tc := range []struct {
		path   string
		failed bool
	}{{"/shutdown?msg=prestop", false}, {"/broken?msg=prestop", true}} {
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
		if got := e.rec.Has("Warning FailedPreStopHook"); got != tc.failed {
			t.Fatalf("%s: FailedPreStopHook event = %v, want %v:\n%s", tc.path, got, tc.failed, e.rec)
		}
	}
}

// A preStop sleep longer than the grace period ends with the grace period
// (the container is then stopped with the 2s minimum), instead of holding
// the termination for the whole sleep.
func TestPreStopSleepBoundedByGracePeriod(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, nil, "a")
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(5))
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 600}}}
	e.sync(pod)
	ps := e.status(pod).ps
	done := make(chan error, 1)
	go func() { done <- e.m.KillPod(context.Background(), pod, ps, nil) }()
	deadline := time.Now().Add(20 * time.Second)
	for !e.clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the sleep hook never started")
		}
		time.Sleep(time.Millisecond)
	}
	e.clock.Step(5 * time.Second) // the grace period, far short of 600s
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("KillPod still waits for the 600s sleep after the 5s grace period")
	}
	if to, _ := e.rt.timeout(ps.FindContainer("a").ID.ID); to != minimumGracePeriod {
		t.Fatalf("stopped with %d, want the %d minimum", to, minimumGracePeriod)
	}
}
