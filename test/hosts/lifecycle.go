package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// nspawnFlags are what a node container needs from systemd-nspawn on a
// host without systemd:
//   - --register=no --keep-unit: there is no machined or host systemd to
//     register with or to make a scope unit;
//   - --console=pipe: no TTY; the console is logged to console.log;
//   - --kill-signal=SIGRTMIN+3: what systemd takes as "power off", so a
//     SIGTERM to nspawn shuts the node down cleanly;
//   - --capability=all and --system-call-filter=@keyring: runc (which
//     later tests run inside) needs every capability and the keyring calls;
//   - --link-journal=no --resolv-conf=off --timezone=off: copy nothing in
//     from the host, and leave its /var/log/journal alone.
var nspawnFlags = []string{
	"--register=no", "--keep-unit", "--console=pipe", "--kill-signal=SIGRTMIN+3",
	"--capability=all", "--system-call-filter=@keyring",
	"--link-journal=no", "--resolv-conf=off", "--timezone=off",
}

// launchScript puts itself (and so nspawn, which it becomes) in the node's
// cgroups in every hierarchy before nspawn starts: nspawn makes its
// payload/ and supervisor/ cgroups where it starts.
const launchScript = `for f in $MINILET_HOSTS_CGROUPS; do echo $$ > "$f" || exit 1; done
unset MINILET_HOSTS_CGROUPS
exec "$@"`

// Start boots the node (again, after Poweroff: on the same root
// filesystem) and waits until systemd reports the system running or
// degraded, or ctx ends.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	switch {
	case n.closed:
		n.mu.Unlock()
		return errors.New("start: the node is closed")
	case n.nspawn != nil:
		n.mu.Unlock()
		return errors.New("start: the node is running")
	}
	n.stopping = false
	n.exited = make(chan struct{})
	n.exitErr = nil
	err := n.launchLocked()
	if err != nil {
		close(n.exited)
		n.exitErr = err
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	go n.supervise()
	return n.waitRunning(ctx)
}

// launchLocked starts nspawn on the node's root filesystem, network
// namespace and cgroups.
func (n *Node) launchLocked() error {
	console, err := os.OpenFile(n.consolePath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	defer func() { _ = console.Close() }() // the child has its own copy
	args := append([]string{"-c", launchScript, "node-launch",
		"systemd-nspawn", "--directory=" + n.rootfs, "--machine=" + n.id,
		"--network-namespace-path=" + filepath.Join("/run/netns", n.netns)},
		nspawnFlags...)
	args = append(args, nodeInitPath)
	cmd := exec.Command("sh", args...)
	cmd.Env = append(os.Environ(), "MINILET_HOSTS_CGROUPS="+strings.Join(n.cgroups.procFiles(), " "))
	cmd.Stdout, cmd.Stderr = console, console
	// Its own process group: a Ctrl-C at the terminal is for the test
	// binary, whose cleanup powers the node off.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("launch: systemd-nspawn: %w", err)
	}
	n.nspawn, n.leader = cmd, 0
	n.boots++
	n.logf("node %s: boot %d: systemd-nspawn pid %d", n.cfg.Name, n.boots, cmd.Process.Pid)
	return nil
}

// supervise waits on nspawn for the node's life: when the node reboots
// (nspawn exits with 133), it boots it again on the same root filesystem,
// as a machine's firmware would; any other exit, or any exit after
// Poweroff, is final.
func (n *Node) supervise() {
	for {
		n.mu.Lock()
		cmd := n.nspawn
		n.mu.Unlock()
		err := cmd.Wait()
		n.mu.Lock()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == rebootStatus && !n.stopping {
			n.logf("node %s: rebooting", n.cfg.Name)
			if err = n.launchLocked(); err == nil {
				n.mu.Unlock()
				continue
			}
		}
		n.nspawn, n.leader, n.exitErr = nil, 0, err
		close(n.exited)
		n.mu.Unlock()
		return
	}
}

// waitRunning waits until systemd in the current boot reports the system
// running, or degraded (a unit that cannot work in a container failed;
// the node is still usable, and tests may look at `systemctl --failed`).
func (n *Node) waitRunning(ctx context.Context) error {
	start := time.Now()
	n.mu.Lock()
	exited, boot := n.exited, n.boots
	n.mu.Unlock()
	err := eventually(ctx, "systemd to be running", func() (bool, string, error) {
		select {
		case <-exited:
			return false, "", fmt.Errorf("nspawn exited: %v", n.exitError())
		default:
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := n.Run(qctx, "systemctl", "is-system-running")
		state := strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			return true, state, nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		return false, state, nil
	})
	if err != nil {
		return fmt.Errorf("boot %d: %w", boot, err)
	}
	n.logf("node %s: boot %d: systemd running after %v", n.cfg.Name, boot, time.Since(start).Round(10*time.Millisecond))
	return nil
}

func (n *Node) exitError() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exitErr
}

// Reboot reboots the node from inside (`systemctl reboot`) and waits until
// the new boot is running. The root filesystem is kept.
func (n *Node) Reboot(ctx context.Context) error {
	n.mu.Lock()
	exited, boot := n.exited, n.boots
	running := n.nspawn != nil
	n.mu.Unlock()
	if !running {
		return errors.New("reboot: the node is not running")
	}
	// systemd may close the connection as it goes down: the new boot says
	// whether it worked.
	_, _ = n.Run(ctx, "systemctl", "reboot")
	err := eventually(ctx, "the node to boot again", func() (bool, string, error) {
		select {
		case <-exited:
			return false, "", fmt.Errorf("nspawn exited: %v", n.exitError())
		default:
		}
		return n.Boots() > boot, fmt.Sprintf("boot %d", n.Boots()), nil
	})
	if err != nil {
		return fmt.Errorf("reboot: %w", err)
	}
	return n.waitRunning(ctx)
}

// Restart powers the node off and boots it again on the same root
// filesystem, as `machinectl stop` then `start` would.
func (n *Node) Restart(ctx context.Context) error {
	if err := n.Poweroff(ctx); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	return n.Start(ctx)
}

// Poweroff shuts the node down from inside (`systemctl poweroff`) and waits
// for nspawn to exit. When the node does not go within StopTimeout (or ctx
// ends first), nspawn is asked to stop it, then everything in the node's
// cgroups is killed. The root filesystem, network and cgroups are kept for
// Start; it returns nspawn's error if it did not exit cleanly.
func (n *Node) Poweroff(ctx context.Context) error {
	n.mu.Lock()
	cmd, exited := n.nspawn, n.exited
	if cmd == nil {
		n.mu.Unlock()
		return nil
	}
	n.stopping = true
	n.mu.Unlock()
	start := time.Now()
	if _, err := n.Run(ctx, "systemctl", "poweroff"); err != nil {
		// Not booted far enough for systemctl: SIGTERM makes nspawn send
		// its kill signal, which systemd takes as a power-off.
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	if !n.awaitExit(ctx, exited, n.cfg.StopTimeout) {
		n.logf("node %s: did not power off in %v; stopping it", n.cfg.Name, n.cfg.StopTimeout)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if !n.awaitExit(ctx, exited, 10*time.Second) {
			n.cgroups.kill()
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	n.logf("node %s: powered off in %v", n.cfg.Name, time.Since(start).Round(10*time.Millisecond))
	err := n.exitError()
	if cerr := n.cgroups.clean(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return fmt.Errorf("poweroff: %w", err)
	}
	return nil
}

// awaitExit reports whether nspawn exited within d (and before ctx ended).
func (n *Node) awaitExit(ctx context.Context, exited <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-exited:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

// Close powers the node off if it runs and removes everything it made on
// the host: its cgroups, network namespace (the veth goes with it),
// overlay mount and directory, and its network when it had one of its own.
// Idempotent.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.StopTimeout+15*time.Second)
	defer cancel()
	var errs []error
	if n.cgroups != nil {
		if err := n.Poweroff(ctx); err != nil {
			n.logf("node %s: %v", n.cfg.Name, err) // cleanup goes on
		}
		errs = append(errs, n.cgroups.remove())
	}
	if n.ip != "" {
		errs = append(errs, delNetns(n.netns))
		n.net.detach(n)
	}
	errs = append(errs, n.removeDir())
	if n.ownNet && n.net != nil {
		errs = append(errs, n.net.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// removeDir unmounts the overlay and removes the node's directory.
func (n *Node) removeDir() error {
	if n.dir == "" {
		return nil
	}
	if n.rootfs != "" {
		err := syscall.Unmount(n.rootfs, 0)
		if errors.Is(err, syscall.EBUSY) {
			// Something killed rather than powered off still holds it:
			// detach it, so that the host is left clean regardless.
			n.logf("node %s: %s is busy; detaching it", n.cfg.Name, n.rootfs)
			err = syscall.Unmount(n.rootfs, syscall.MNT_DETACH)
		}
		// EINVAL: not mounted; ENOENT: a sweep removed it already.
		if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("unmounting %s: %w", n.rootfs, err)
		}
	}
	if err := os.RemoveAll(n.dir); err != nil {
		return fmt.Errorf("removing %s: %w", n.dir, err)
	}
	return nil
}

func (n *Node) consolePath() string { return filepath.Join(n.dir, "console.log") }

// consoleTail is the end of the node's console (nspawn's and systemd's
// output, every boot), for failure messages.
func (n *Node) consoleTail(max int64) string {
	f, err := os.Open(n.consolePath())
	if err != nil {
		return "(no console log: " + err.Error() + ")"
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, 0)
	}
	b := make([]byte, max)
	k, _ := f.Read(b)
	return string(b[:k])
}
