// Package tcp runs tcpSocket probes: success when a TCP connection is
// established within the timeout.
package tcp

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/minilet/minilet/internal/prober/probe"
)

// Probe connects to host:port. The connection is closed with SO_LINGER 0
// (a reset), so that thousands of probes a second leave no TIME_WAIT
// sockets behind on the node; the probed server sees a reset instead of
// an orderly close, which is harmless for a connect-only check.
func Probe(ctx context.Context, host string, port int, timeout time.Duration) (probe.Result, string, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	// No TCP keep-alive: the connection lives for a moment, and skipping
	// it saves three setsockopt calls per probe.
	d := net.Dialer{Timeout: timeout, KeepAlive: -1}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return probe.Failure, err.Error(), nil
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
	return probe.Success, "", nil
}
