package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"time"
)

// nodeEnv is the environment commands run with inside a node: the node's
// own, not the test process's.
var nodeEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root", "LANG=C.UTF-8", "TERM=dumb",
}

// Run runs a command inside the node and returns its output (stdout and
// stderr together). It enters every namespace of the node's PID 1 with
// nsenter (with no systemd on the host there is no machined, so no
// `systemd-run --machine`); the command's processes stay in the test
// process's cgroup, so anything long-lived should be started with
// systemd-run inside. The error wraps an *exec.ExitError when the
// command failed.
func (n *Node) Run(ctx context.Context, cmd ...string) (string, error) {
	return n.run(ctx, nil, cmd...)
}

func (n *Node) run(ctx context.Context, stdin io.Reader, cmd ...string) (string, error) {
	if len(cmd) == 0 {
		return "", errors.New("run: no command")
	}
	pid, err := n.leaderPID()
	if err != nil {
		return "", fmt.Errorf("run %s: %w", cmd[0], err)
	}
	args := append([]string{"-t", strconv.Itoa(pid), "-a", "--", "/usr/bin/env", "-i"}, nodeEnv...)
	c := exec.CommandContext(ctx, "nsenter", append(args, cmd...)...)
	var out bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = stdin, &out, &out
	// A command that leaves a background process holding its output must
	// not hang the test.
	c.WaitDelay = 5 * time.Second
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("node %s: %s: %w: %s", n.cfg.Name, strings.Join(cmd, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// leaderPID finds the container's PID 1 as the host sees it: the child
// of nspawn that is PID 1 of its own PID namespace.
func (n *Node) leaderPID() (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nspawn == nil {
		return 0, errors.New("the node is not running")
	}
	if n.leader != 0 {
		return n.leader, nil
	}
	nspawn := n.nspawn.Process.Pid
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", nspawn, nspawn))
	if err != nil {
		return 0, fmt.Errorf("finding the node's PID 1: %w", err)
	}
	for _, f := range strings.Fields(string(children)) {
		pid, _ := strconv.Atoi(f)
		if isNamespaceInit(pid) {
			n.leader = pid
			return pid, nil
		}
	}
	return 0, errors.New("the node's PID 1 has not started yet")
}

// isNamespaceInit reports whether pid is PID 1 in its own PID namespace
// (its NSpid line ends in 1), which tells the container's init from
// nspawn's short-lived setup child.
func isNamespaceInit(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "NSpid:" {
			return f[len(f)-1] == "1"
		}
	}
	return false
}

// CopyIn copies a file or a directory tree from the host into the node at
// nodePath, as the node sees it (through its own mounts, which writing
// into Rootfs from the host would miss). Modes are kept; the parent
// directories are made.
func (n *Node) CopyIn(ctx context.Context, hostPath, nodePath string) error {
	st, err := os.Stat(hostPath)
	if err != nil {
		return fmt.Errorf("copy in: %w", err)
	}
	if !path.IsAbs(nodePath) {
		return fmt.Errorf("copy in: node path %q is not absolute", nodePath)
	}
	if st.IsDir() {
		return n.copyInDir(ctx, hostPath, nodePath)
	}
	f, err := os.Open(hostPath)
	if err != nil {
		return fmt.Errorf("copy in: %w", err)
	}
	defer func() { _ = f.Close() }()
	mode := strconv.FormatUint(uint64(st.Mode().Perm()), 8)
	script := `mkdir -p "$(dirname "$1")" && cat > "$1.copy-in" && chmod "$2" "$1.copy-in" && mv -f "$1.copy-in" "$1"`
	if _, err := n.run(ctx, f, "sh", "-c", script, "copy-in", nodePath, mode); err != nil {
		return fmt.Errorf("copy in %s: %w", hostPath, err)
	}
	return nil
}

// copyInDir streams a tar of the host directory into tar inside the node.
func (n *Node) copyInDir(ctx context.Context, hostDir, nodeDir string) error {
	tar := exec.CommandContext(ctx, "tar", "-C", hostDir, "-cf", "-", ".")
	out, err := tar.StdoutPipe()
	if err != nil {
		return fmt.Errorf("copy in %s: %w", hostDir, err)
	}
	var tarErr bytes.Buffer
	tar.Stderr = &tarErr
	if err := tar.Start(); err != nil {
		return fmt.Errorf("copy in %s: tar: %w", hostDir, err)
	}
	_, runErr := n.run(ctx, out, "sh", "-c", `mkdir -p "$1" && tar -C "$1" -xpf -`, "copy-in", nodeDir)
	// Should the node's side have failed, tar must not block on a pipe
	// nobody reads: closing our end makes it fail with EPIPE.
	_ = out.Close()
	if err := tar.Wait(); err != nil {
		return fmt.Errorf("copy in %s: tar: %w: %s", hostDir, err, tarErr.String())
	}
	if runErr != nil {
		return fmt.Errorf("copy in %s: %w", hostDir, runErr)
	}
	return nil
}
