package remote_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/remote"
	"github.com/minilet/minilet/internal/errdefs"
)

// These tests need no containerd: a real gRPC server on a unix socket
// plays a CRI runtime that answers the handshake and then misbehaves in
// the one way each test is about.

// stubRuntime answers Version with apiVersion and blocks ListContainers
// until the call's context ends.
type stubRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	apiVersion string
	// runSandbox, when set, answers RunPodSandbox.
	runSandbox func(ctx context.Context) (string, error)
}

func (s *stubRuntime) RunPodSandbox(ctx context.Context, _ *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	if s.runSandbox == nil {
		return s.UnimplementedRuntimeServiceServer.RunPodSandbox(ctx, nil)
	}
	id, err := s.runSandbox(ctx)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (s *stubRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "stub", RuntimeVersion: "1.0", RuntimeApiVersion: s.apiVersion}, nil
}

func (s *stubRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

func (s *stubRuntime) ListContainers(ctx context.Context, _ *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

type stubImages struct {
	runtimeapi.UnimplementedImageServiceServer
}

func (stubImages) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// startStub serves a stub runtime on sock until stop is called.
func startStub(sock, apiVersion string) (stop func(), err error) {
	return startStubRuntime(sock, &stubRuntime{apiVersion: apiVersion})
}

// startStubRuntime serves rt on sock until stop is called.
func startStubRuntime(sock string, rt *stubRuntime) (stop func(), err error) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	runtimeapi.RegisterImageServiceServer(srv, stubImages{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	var once sync.Once
	return func() { once.Do(func() { srv.Stop(); <-done }) }, nil
}

// serveStub is startStub, stopped at the latest when the test ends.
func serveStub(t *testing.T, sock, apiVersion string) (stop func()) {
	t.Helper()
	stop, err := startStub(sock, apiVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return stop
}

func stubSocket(t *testing.T) string { return filepath.Join(t.TempDir(), "cri.sock") }

func TestRequestTimeoutBoundsCalls(t *testing.T) {
	sock := stubSocket(t)
	serveStub(t, sock, "v1")
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: "unix://" + sock, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	errc := make(chan error, 1)
	go func() {
		_, err := rt.ListContainers(context.Background(), nil)
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ListContainers on a runtime that never answers: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ListContainers outlived the request timeout by 30 s")
	}
}

func TestVersionHandshakeRejectsOtherCRIVersions(t *testing.T) {
	sock := stubSocket(t)
	serveStub(t, sock, "v1alpha2")
	_, err := remote.New(context.Background(), remote.Config{Endpoint: "unix://" + sock})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("New against a CRI v1alpha2 runtime: %v, want ErrInvalidArgument", err)
	}
}

func TestNewWaitsForARuntimeThatStartsLate(t *testing.T) {
	sock := stubSocket(t)
	type started struct {
		stop func()
		err  error
	}
	late := make(chan started, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // the runtime comes up late
		stop, err := startStub(sock, "v1")
		late <- started{stop, err}
	}()
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: "unix://" + sock, StartupWait: time.Minute})
	s := <-late
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(s.stop)
	if err != nil {
		t.Fatalf("New with StartupWait: %v", err)
	}
	_ = rt.Close(context.Background())
}

func TestClientReconnectsToARestartedRuntime(t *testing.T) {
	sock := stubSocket(t)
	stop := serveStub(t, sock, "v1")
	rt, err := remote.New(context.Background(), remote.Config{Endpoint: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	ctx := context.Background()
	if _, err := rt.Status(ctx, false); err != nil {
		t.Fatalf("Status: %v", err)
	}
	stop()
	waitUntil(t, "Status to fail with ErrUnavailable", func() (bool, string) {
		_, err := rt.Status(ctx, false)
		return errors.Is(err, errdefs.ErrUnavailable), errString(err)
	})
	serveStub(t, sock, "v1")
	waitUntil(t, "the same client to reach the restarted runtime", func() (bool, string) {
		_, err := rt.Status(ctx, false)
		return err == nil, errString(err)
	})
}
