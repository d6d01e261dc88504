package tcp

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/prober/probe"
)

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

func TestProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port

	got, out, err := Probe(context.Background(), "127.0.0.1", port, time.Second)
	if err != nil || got != probe.Success {
		t.Fatalf("open port: Probe = %v %q %v, want success", got, out, err)
	}
	select {
	case <-accepted:
	case <-time.After(30 * time.Second):
		t.Fatal("the listener never saw the probe's connection")
	}

	got, out, err = Probe(context.Background(), "127.0.0.1", refusedPort(t), time.Second)
	if err != nil || got != probe.Failure || out == "" {
		t.Fatalf("refused port: Probe = %v %q %v, want failure with the reason", got, out, err)
	}
}
