package grpc

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/minilet/minilet/internal/prober/probe"
)

// serve starts a real gRPC server on loopback; withHealth registers the
// standard health service with "web" SERVING and "db" NOT_SERVING, and a
// "slow" service that never answers.
func serve(t *testing.T, withHealth bool) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if withHealth {
		h := health.NewServer()
		h.SetServingStatus("web", healthpb.HealthCheckResponse_SERVING)
		h.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
		healthpb.RegisterHealthServer(s, slowHealth{h})
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("grpc server: %v", err)
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}

// slowHealth is the standard health server, except that service "slow"
// hangs until the caller gives up.
type slowHealth struct{ *health.Server }

func (h slowHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() == "slow" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Server.Check(ctx, req)
}

func TestProbe(t *testing.T) {
	healthy := serve(t, true)
	bare := serve(t, false)
	tests := []struct {
		name    string
		port    int
		service string
		want    probe.Result
		output  string
		timeout time.Duration
	}{
		{"serving service", healthy, "web", probe.Success, "service is serving", 10 * time.Second},
		{"whole server", healthy, "", probe.Success, "service is serving", 10 * time.Second},
		{"not serving", healthy, "db", probe.Failure, `service unhealthy (responded with "NOT_SERVING")`, 10 * time.Second},
		{"unknown service", healthy, "nope", probe.Failure, "health rpc probe failed", 10 * time.Second},
		{"no health service", bare, "", probe.Failure, "doesn't implement the grpc health protocol", 10 * time.Second},
		{"hanging check", healthy, "slow", probe.Failure, "did not complete within", 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, out, err := Probe(context.Background(), "127.0.0.1", tt.port, tt.service, tt.timeout)
			if err != nil || got != tt.want || !strings.Contains(out, tt.output) {
				t.Fatalf("Probe = %v %q %v, want %v containing %q", got, out, err, tt.want, tt.output)
			}
		})
	}
}

func TestProbeNoServer(t *testing.T) {
	got, out, err := Probe(context.Background(), "127.0.0.1", refusedPort(t), "", 10*time.Second)
	if err != nil || got != probe.Failure {
		t.Fatalf("Probe = %v %q %v, want failure", got, out, err)
	}
}

// refusedPort reserves a loopback port that refuses connections: a socket
// bound without SO_REUSEADDR and never listening, so no other listener can
// take the port while the test runs.
func refusedPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}
