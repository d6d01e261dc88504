package nodeshutdown

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

const (
	logindDest      = "org.freedesktop.login1"
	logindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"
	// logindDropIn raises InhibitDelayMaxSec, as the kubelet's
	// 99-kubelet.conf does.
	logindDropIn = "/etc/systemd/logind.conf.d/99-minilet.conf"
)

// SystemLogind is logind on the system bus.
type SystemLogind struct {
	conn *dbus.Conn
}

var _ Logind = (*SystemLogind)(nil)

// ConnectLogind connects to the system bus.
func ConnectLogind() (*SystemLogind, error) {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		return nil, fmt.Errorf("system bus: %w", err)
	}
	return &SystemLogind{conn: conn}, nil
}

// Close closes the bus connection (and with it a held lock).
func (l *SystemLogind) Close() error { return l.conn.Close() }

func (l *SystemLogind) manager() dbus.BusObject { return l.conn.Object(logindDest, logindPath) }

// InhibitDelayMax implements Logind.
func (l *SystemLogind) InhibitDelayMax() (time.Duration, error) {
	v, err := l.manager().GetProperty(logindInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, err
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec is %T, not a number", v.Value())
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// RaiseInhibitDelayMax implements Logind: a drop-in, then logind reloads
// its configuration on SIGHUP (sent through systemd).
func (l *SystemLogind) RaiseInhibitDelayMax(d time.Duration) error {
	conf := fmt.Sprintf("# Written by minilet: its shutdownGracePeriod needs logind to wait this long.\n[Login]\nInhibitDelayMaxSec=%d\n", int64((d+time.Second-1)/time.Second))
	if err := os.MkdirAll(filepath.Dir(logindDropIn), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(logindDropIn, []byte(conf), 0o644); err != nil {
		return err
	}
	systemd := l.conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	call := systemd.Call("org.freedesktop.systemd1.Manager.KillUnit", 0, "systemd-logind.service", "main", int32(unix.SIGHUP))
	if call.Err != nil {
		return fmt.Errorf("reloading systemd-logind: %w", call.Err)
	}
	// logind applies the file once it has handled the signal.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cur, err := l.InhibitDelayMax(); err == nil && cur >= d {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil // the caller reads it again and says what it is
}

// Inhibit implements Logind.
func (l *SystemLogind) Inhibit() (func(), error) {
	var fd dbus.UnixFD
	err := l.manager().Call(logindInterface+".Inhibit", 0, "shutdown", "minilet",
		"minilet stops pods gracefully before the node shuts down", "delay").Store(&fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "logind-inhibitor")
	return func() { _ = f.Close() }, nil
}

// PrepareForShutdown implements Logind.
func (l *SystemLogind) PrepareForShutdown(ctx context.Context) (<-chan bool, error) {
	match := []dbus.MatchOption{dbus.WithMatchInterface(logindInterface), dbus.WithMatchMember("PrepareForShutdown")}
	if err := l.conn.AddMatchSignal(match...); err != nil {
		return nil, err
	}
	signals := make(chan *dbus.Signal, 8)
	l.conn.Signal(signals)
	out := make(chan bool)
	go func() {
		defer close(out)
		defer l.conn.RemoveSignal(signals)
		for {
			select {
			case <-ctx.Done():
				return
			case s, ok := <-signals:
				if !ok {
					return
				}
				if s.Name != logindInterface+".PrepareForShutdown" || len(s.Body) != 1 {
					continue
				}
				starting, ok := s.Body[0].(bool)
				if !ok {
					continue
				}
				select {
				case out <- starting:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
