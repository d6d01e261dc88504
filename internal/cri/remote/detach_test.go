package remote_test

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/internal/errdefs"
)

// slowSandbox is a runtime whose RunPodSandbox runs until released, and
// tells whether the runtime saw the call cancelled (what makes containerd
// 1.6 leave the shim it started behind).
type slowSandbox struct {
	started   chan struct{}
	release   chan struct{}
	cancelled chan bool
}

func newSlowSandbox(t *testing.T) (*slowSandbox, string) {
	t.Helper()
	s := &slowSandbox{started: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan bool, 1)}
	sock := stubSocket(t)
	stop, err := startStubRuntime(sock, &stubRuntime{apiVersion: "v1", runSandbox: func(ctx context.Context) (string, error) {
		close(s.started)
		select {
		case <-s.release:
			s.cancelled <- false
			return "sb1", nil
		case <-ctx.Done():
			s.cancelled <- true
			return "", ctx.Err()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s, "unix://" + sock
}

func TestRunPodSandboxOutlivesItsCallersCancellation(t *testing.T) {
	s, endpoint := newSlowSandbox(t)
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: endpoint, DrainTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := rt.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, "")
		errc <- err
	}()
	<-s.started
	cancel() // the agent stops
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("RunPodSandbox after its caller's context ended: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the caller of RunPodSandbox still waits 30 s after its context ended")
	}

	// Close waits for the call, which the runtime finishes uncancelled.
	closed := make(chan error, 1)
	go func() { closed <- rt.Close(context.Background()) }()
	select {
	case <-closed:
		t.Fatal("Close returned while RunPodSandbox was still running")
	case <-time.After(200 * time.Millisecond): // a negative check: Close must still be waiting
	}
	close(s.release)
	if c := <-s.cancelled; c {
		t.Error("the runtime saw RunPodSandbox cancelled")
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close still waits 30 s after the last call finished")
	}
}

func TestCloseWaitsForCallsInFlightOnlyUntilDrainTimeout(t *testing.T) {
	s, endpoint := newSlowSandbox(t)
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: endpoint, DrainTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = rt.RunPodSandbox(context.Background(), &runtimeapi.PodSandboxConfig{}, "") }()
	<-s.started
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- rt.Close(context.Background()) }()
	select {
	case <-closed:
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Errorf("Close returned after %s, before its drain timeout of 300ms", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close with a drain timeout of 300ms still waits after 30 s for a call that never ends")
	}
	if c := <-s.cancelled; !c {
		t.Error("the call in flight was not ended by Close")
	}
}

func TestNewRejectsNegativeDrainTimeout(t *testing.T) {
	_, err := remote.New(context.Background(), remote.Config{Endpoint: "unix:///nonexistent.sock", DrainTimeout: -time.Second})
	if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("New with DrainTimeout -1s: %v, want ErrInvalidArgument", err)
	}
}

func TestNoRunPodSandboxAfterItsCallersContextEnded(t *testing.T) {
	s, endpoint := newSlowSandbox(t)
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rt.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("RunPodSandbox with an ended context: %v, want context.Canceled", err)
	}
	select {
	case <-s.started:
		t.Error("the runtime was asked to run a sandbox by a caller already gone")
	default:
	}
}
