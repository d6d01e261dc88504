// Package podns keeps the namespaces a pod's containers share: a network,
// UTS and IPC namespace per pod sandbox, each held open by a bind mount of
// its nsfs file under the sandbox's directory, so that they outlive the
// process that made them (and the agent) until the sandbox is removed.
// Containers join them by path (setns); CNI attaches the network one.
package podns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Kind is a namespace a pod can have of its own.
type Kind string

// The kinds of pod namespaces.
const (
	Net Kind = "net"
	UTS Kind = "uts"
	IPC Kind = "ipc"
	// PID is a pod's shared PID namespace, which lives only as long as
	// its first process (a pause): it is held with HoldPID.
	PID Kind = "pid"
)

var cloneFlags = map[Kind]int{Net: unix.CLONE_NEWNET, UTS: unix.CLONE_NEWUTS, IPC: unix.CLONE_NEWIPC}

// CloneFlag is the clone/setns flag of kind.
func CloneFlag(k Kind) int { return cloneFlags[k] }

// Paths are the bind-mounted namespace files of one pod, by kind; a kind
// the pod shares with the host is absent.
type Paths map[Kind]string

// Create makes new namespaces of the given kinds and holds each one at
// dir/<kind>; the UTS namespace gets hostname, the network one its lo up.
// On failure nothing is left.
func Create(dir string, kinds []Kind, hostname string) (Paths, error) {
	if len(kinds) == 0 {
		return Paths{}, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	type result struct {
		paths Paths
		err   error
	}
	done := make(chan result, 1)
	// unshare changes the calling thread only. The thread is never handed
	// back to the Go scheduler: the goroutine ends locked, so the runtime
	// ends the thread with its namespaces.
	go func() {
		runtime.LockOSThread()
		paths, err := createOnThisThread(dir, kinds, hostname)
		done <- result{paths, err}
	}()
	r := <-done
	if r.err != nil {
		_ = Remove(dir)
		return nil, r.err
	}
	return r.paths, nil
}

func createOnThisThread(dir string, kinds []Kind, hostname string) (Paths, error) {
	flags := 0
	for _, k := range kinds {
		f, ok := cloneFlags[k]
		if !ok {
			return nil, fmt.Errorf("unknown namespace kind %q", k)
		}
		flags |= f
	}
	if err := unix.Unshare(flags); err != nil {
		return nil, fmt.Errorf("unshare %v: %w", kinds, err)
	}
	if flags&unix.CLONE_NEWNET != 0 {
		if err := loopbackUp(); err != nil {
			return nil, err
		}
	}
	if hostname != "" && flags&unix.CLONE_NEWUTS != 0 {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return nil, fmt.Errorf("set hostname %q: %w", hostname, err)
		}
	}
	tid := unix.Gettid()
	paths := Paths{}
	for _, k := range kinds {
		p := filepath.Join(dir, string(k))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return nil, err
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/%s", tid, k)
		if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
			return nil, fmt.Errorf("hold %s namespace at %s: %w", k, p, err)
		}
		paths[k] = p
	}
	return paths, nil
}

// HoldPID holds the PID namespace of process pid at dir/pid. Once that
// process is gone the file still opens but no process can be forked into
// the namespace: a container never lands in another pod's namespace
// through a reused PID.
func HoldPID(dir string, pid int) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	p := filepath.Join(dir, string(PID))
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return "", err
	}
	if err := unix.Mount(fmt.Sprintf("/proc/%d/ns/pid", pid), p, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("hold the pid namespace of %d at %s: %w", pid, p, err)
	}
	return p, nil
}

// loopbackUp brings up lo in the calling thread's (new) network namespace,
// which every pod has: what CNI's loopback plugin does, without a plugin
// to start.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	return nil
}

// Remove releases the namespaces held under dir and removes dir. A
// namespace ends when no process is left in it. Removing what is already
// gone is not an error.
func Remove(dir string) error {
	var errs []error
	for _, k := range []Kind{Net, UTS, IPC, PID} {
		p := filepath.Join(dir, string(k))
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("release %s namespace: %w", k, err))
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Alive reports whether p holds a namespace (its bind mount is in place).
func Alive(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// DialIn connects to address over TCP from inside the network namespace
// held at netns ("" for the caller's own): the socket is made on a thread
// moved into the namespace, and keeps to it after. The thread is never
// handed back to other goroutines.
func DialIn(ctx context.Context, netns, address string) (net.Conn, error) {
	var d net.Dialer
	if netns == "" {
		return d.DialContext(ctx, "tcp", address)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // ends with the goroutine, never unlocked
		f, err := os.Open(netns)
		if err != nil {
			done <- result{nil, err}
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		_ = f.Close()
		if err != nil {
			done <- result{nil, fmt.Errorf("enter network namespace %s: %w", netns, err)}
			return
		}
		conn, err := d.DialContext(ctx, "tcp", address)
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}
