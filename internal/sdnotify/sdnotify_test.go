package sdnotify

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/testutil"
)

type recorder struct {
	mu     sync.Mutex
	states []string
}

func (r *recorder) send(s string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
	return true, nil
}

func (r *recorder) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.states {
		if x == s {
			n++
		}
	}
	return n
}

// Keep-alives go at half the watchdog interval, and only while the agent
// is healthy: a stuck sync loop lets systemd's watchdog restart it.
func TestWatchdogFollowsHealth(t *testing.T) {
	var rec recorder
	clk := clocktesting.NewFakeClock(time.Now())
	var mu sync.Mutex
	var sick error
	checks := 0
	checked := func() int { mu.Lock(); defer mu.Unlock(); return checks }
	wd := 20 * time.Second
	n, err := New(Config{Send: rec.send, WatchdogInterval: &wd, Clock: clk,
		Healthy: func() error { mu.Lock(); defer mu.Unlock(); checks++; return sick }})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(context.Background())
	defer n.Stop()
	testutil.WaitFor(t, "the first keep-alive", func() bool { return rec.count("WATCHDOG=1") == 1 })
	clk.Step(10 * time.Second)
	testutil.WaitFor(t, "a keep-alive at half the interval", func() bool { return rec.count("WATCHDOG=1") == 2 })
	mu.Lock()
	sick = errors.New("stuck")
	mu.Unlock()
	clk.Step(10 * time.Second)
	testutil.WaitFor(t, "the health check at the next tick", func() bool { return checked() == 3 })
	if got := rec.count("WATCHDOG=1"); got != 2 {
		t.Fatalf("keep-alives while unhealthy: %d, want none beyond 2", got)
	}
	n.Stop()
	n.Stop() // idempotent
}

// Without a watchdog nothing is sent but the states.
func TestNoWatchdog(t *testing.T) {
	var rec recorder
	zero := time.Duration(0)
	n, err := New(Config{Send: rec.send, WatchdogInterval: &zero})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(context.Background())
	n.Ready("serving")
	n.Stopping()
	n.Stop()
	if len(rec.states) != 2 || !strings.HasPrefix(rec.states[0], "READY=1\nSTATUS=serving") || !strings.HasPrefix(rec.states[1], "STOPPING=1") {
		t.Errorf("states = %q", rec.states)
	}
}

// The real sender writes to $NOTIFY_SOCKET, as systemd reads it.
func TestReadyReachesTheNotifySocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "")
	n, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	n.Ready("3 pods")
	buf := make([]byte, 256)
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	k, err := conn.Read(buf)
	if err != nil || string(buf[:k]) != "READY=1\nSTATUS=3 pods" {
		t.Fatalf("read %q, %v", buf[:k], err)
	}
	_ = os.Remove(sock)
}
