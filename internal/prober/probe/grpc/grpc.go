// Package grpc runs grpc probes: grpc.health.v1.Health/Check with the
// probe's service name; only SERVING is a success.
package grpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/minilet/minilet/internal/prober/probe"
)

// Probe calls Health/Check on host:port for service within timeout. Every
// way the server can fail to answer SERVING is a failure with the reason
// as output; only a bad address is an error.
func Probe(ctx context.Context, host string, port int, service string, timeout time.Duration) (probe.Result, string, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(probe.UserAgent),
	)
	if err != nil {
		return probe.Unknown, "", fmt.Errorf("grpc probe %s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		st, _ := status.FromError(err)
		switch {
		case st.Code() == codes.Unimplemented:
			return probe.Failure, fmt.Sprintf("this server doesn't implement the grpc health protocol (grpc.health.v1.Health): %s", st.Message()), nil
		case st.Code() == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
			return probe.Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout), nil
		case st.Code() == codes.Unavailable:
			return probe.Failure, fmt.Sprintf("failed to connect to service %q at %s: %s", service, addr, st.Message()), nil
		default:
			return probe.Failure, fmt.Sprintf("error: health rpc probe failed: %v", err), nil
		}
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return probe.Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()), nil
	}
	return probe.Success, "service is serving", nil
}
