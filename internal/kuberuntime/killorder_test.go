package kuberuntime

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Like the kubelet, a pod's sidecar is stopped only after its app
// container has stopped (it may serve the app until then), and the time
// it waited comes out of its grace period.
func TestSidecarStopsAfterTheApp(t *testing.T) {
	e := newEnv(t)
	pod := mkPod(v1.RestartPolicyAlways, []v1.Container{initC("proxy", true)}, "app")
	pod.Spec.TerminationGracePeriodSeconds = ptr(int64(30))
	e.sync(pod) // the sidecar
	e.sync(pod) // the app
	ps := e.status(pod).ps
	app, proxy := ps.FindContainer("app"), ps.FindContainer("proxy")
	if app == nil || proxy == nil {
		t.Fatalf("pod not up: %+v", ps.Containers)
	}
	appStopping, releaseApp := make(chan struct{}), make(chan struct{})
	e.rt.onStop = func(id string) {
		if id == app.ID.ID {
			close(appStopping)
			<-releaseApp // the app takes a while to exit
		}
	}
	done := make(chan error, 1)
	go func() { done <- e.m.KillPod(context.Background(), pod, ps, nil) }()
	<-appStopping
	// The sidecar now either waits for its turn (a timer on the fake
	// clock) or, wrongly, is stopped while the app still runs.
	deadline := time.Now().Add(20 * time.Second)
	for !e.clock.HasWaiters() {
		if _, stopped := e.rt.timeout(proxy.ID.ID); stopped {
			t.Fatal("the sidecar was stopped while the app was still stopping")
		}
		if time.Now().After(deadline) {
			t.Fatal("the sidecar never waited for the app")
		}
		time.Sleep(time.Millisecond)
	}
	e.clock.Step(7 * time.Second) // the app takes 7s to stop
	close(releaseApp)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if to, _ := e.rt.timeout(app.ID.ID); to != 30 {
		t.Fatalf("app stopped with %d, want 30", to)
	}
	if to, _ := e.rt.timeout(proxy.ID.ID); to != 23 {
		t.Fatalf("sidecar stopped with %d, want the 23s left of 30", to)
	}
}
