package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveWithTimeouts runs a read-only server with short timeouts until the
// test ends and returns its address.
func serveWithTimeouts(t *testing.T, cfg Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- NewReadOnly(cfg).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// closedWithin reports whether the server closes conn (EOF on read)
// before the deadline.
func closedWithin(t *testing.T, conn net.Conn, r io.Reader, d time.Duration) bool {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true // EOF (nil from io.Copy) or reset: the server closed it
}

// A client that opens a connection and never sends a whole header is cut
// off after ReadHeaderTimeout, not held forever.
func TestServerClosesAConnectionWithoutAHeader(t *testing.T) {
	addr := serveWithTimeouts(t, Config{ReadHeaderTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil { // no final CRLF
		t.Fatal(err)
	}
	start := time.Now()
	// 5 s: well past 200 ms on a busy machine, well before the default 10 s.
	if !closedWithin(t, conn, conn, 5*time.Second) {
		t.Fatal("the server kept a connection with an unfinished header open")
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("closed after %v, before the header timeout", took)
	}
}

// A keep-alive connection left idle after a request is closed after
// IdleTimeout.
func TestServerClosesAnIdleKeepAliveConnection(t *testing.T) {
	addr := serveWithTimeouts(t, Config{IdleTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" || resp.Close {
		t.Fatalf("healthz = %d %q (close %v)", resp.StatusCode, body, resp.Close)
	}
	if !closedWithin(t, conn, br, 30*time.Second) {
		t.Fatal("the server kept an idle keep-alive connection open")
	}
}

func TestServerTimeoutDefaults(t *testing.T) {
	s := NewReadOnly(Config{})
	if s.cfg.ReadHeaderTimeout != DefaultReadHeaderTimeout || s.cfg.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("timeouts %v, %v; want %v, %v", s.cfg.ReadHeaderTimeout, s.cfg.IdleTimeout, DefaultReadHeaderTimeout, DefaultIdleTimeout)
	}
	a := NewAdmin(AdminConfig{})
	if a.srv.cfg.ReadHeaderTimeout != DefaultReadHeaderTimeout || a.srv.cfg.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("admin timeouts %v, %v", a.srv.cfg.ReadHeaderTimeout, a.srv.cfg.IdleTimeout)
	}
}
