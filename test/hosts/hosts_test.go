package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNodeContainerBoots proves the test bed: two nodes with systemd as
// PID 1 on one private network, reaching each other and nothing else,
// enforcing a memory limit, surviving a reboot and a restart with their
// files, and leaving nothing behind on the host once removed.
func TestNodeContainerBoots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	net := NewNetwork(t)
	a := StartNode(t, NodeConfig{Name: "node-a", Network: net})
	b := StartNode(t, NodeConfig{Name: "node-b", Network: net})

	t.Run("systemd is PID 1", func(t *testing.T) {
		for _, n := range []*Node{a, b} {
			mustOutput(ctx, t, n, "systemd", "cat", "/proc/1/comm")
			mustOutput(ctx, t, n, n.Name(), "hostname")
			state := trimmed(ctx, t, n, "systemctl", "is-system-running")
			switch state {
			case "running":
			case "degraded": // usable; say what failed, for whoever fixes the image
				t.Logf("%s is degraded: %s", n.Name(), trimmed(ctx, t, n, "systemctl", "--failed", "--no-legend", "--plain"))
			default:
				t.Errorf("%s: systemctl is-system-running = %q, want running or degraded", n.Name(), state)
			}
		}
	})
	t.Run("nodes reach each other and nothing else", func(t *testing.T) {
		trimmed(ctx, t, a, "ping", "-c", "1", "-W", "5", b.IP())
		trimmed(ctx, t, b, "ping", "-c", "1", "-W", "5", "node-a") // by name, from /etc/hosts
		if out := trimmed(ctx, t, a, "ip", "route", "show", "default"); out != "" {
			t.Errorf("node-a has a default route: %s", out)
		}
		if out, err := a.Run(ctx, "ip", "route", "get", "1.1.1.1"); err == nil {
			t.Errorf("node-a has a route out of the machine: %s", out)
		}
		if hostIP := hostAddress(); hostIP != "" {
			if out, err := a.Run(ctx, "ping", "-c", "1", "-W", "1", hostIP); err == nil {
				t.Errorf("node-a reaches the host's address %s: %s", hostIP, out)
			}
		}
	})
	t.Run("memory limit is enforced", func(t *testing.T) { testMemoryLimit(ctx, t, a) })
	t.Run("files survive a reboot", func(t *testing.T) { testReboot(ctx, t, a) })
	t.Run("files survive a restart", func(t *testing.T) { testRestart(ctx, t, b) })
	t.Run("power off leaves nothing behind", func(t *testing.T) { testNothingLeft(ctx, t, net, a, b) })
}

// testMemoryLimit runs a 200 MB hog under MemoryMax=50M. systemd 252 on
// cgroup v1 cannot tell an OOM kill from any SIGKILL (it reads oom_kill
// from memory.events, a v2 file), so the unit's Result is "signal" here,
// not "oom-kill": the proof is the kernel's own count of OOM kills in the
// unit's memory cgroup, read by the unit's shell, which outlives the hog.
func testMemoryLimit(ctx context.Context, t *testing.T, n *Node) {
	script := `head -c 200M /dev/zero | tail; echo "status=$?"
cg=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
echo "limit=$(cat /sys/fs/cgroup/memory$cg/memory.limit_in_bytes)"
sed -n 's/^oom_kill /oom_kill=/p' /sys/fs/cgroup/memory$cg/memory.oom_control`
	out := trimmed(ctx, t, n, "systemd-run", "--wait", "--pipe", "--quiet", "-p", "MemoryMax=50M", "sh", "-c", script)
	t.Logf("hog under MemoryMax=50M: %s", strings.ReplaceAll(out, "\n", " "))
	for _, want := range []string{"status=137", "limit=52428800"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the hog's unit output; got:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`oom_kill=(\d+)`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" {
		t.Errorf("the kernel counted no OOM kill in the unit's memory cgroup; got:\n%s", out)
	}
}

// testReboot reboots a node from inside: nspawn exits 133 and the harness
// boots the same root filesystem again. /root persists; /run, a tmpfs,
// must not, which shows the node really booted again.
func testReboot(ctx context.Context, t *testing.T, n *Node) {
	trimmed(ctx, t, n, "sh", "-c", "echo kept > /root/marker && echo gone > /run/marker")
	copyInFile(ctx, t, n, "/opt/copied/file")
	boots := n.Boots()
	start := time.Now()
	if err := n.Reboot(ctx); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	t.Logf("reboot to running: %v", time.Since(start).Round(10*time.Millisecond))
	if n.Boots() != boots+1 {
		t.Errorf("boots = %d after a reboot, want %d", n.Boots(), boots+1)
	}
	mustOutput(ctx, t, n, "kept", "cat", "/root/marker")
	mustOutput(ctx, t, n, "copied in", "cat", "/opt/copied/file")
	if out, err := n.Run(ctx, "cat", "/run/marker"); err == nil {
		t.Errorf("/run/marker survived the reboot (%q): the node did not boot again", out)
	}
}

// testRestart powers a node off and boots it again on the same root
// filesystem.
func testRestart(ctx context.Context, t *testing.T, n *Node) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "tool"), []byte("#!/bin/sh\necho tool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := n.CopyIn(ctx, dir, "/opt/tree"); err != nil {
		t.Fatalf("copy in: %v", err)
	}
	start := time.Now()
	if err := n.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("restart to running: %v", time.Since(start).Round(10*time.Millisecond))
	mustOutput(ctx, t, n, "tool ran", "/opt/tree/sub/tool")
}

// testNothingLeft powers both nodes off, removes them and their network,
// and looks for anything of theirs on the host.
func testNothingLeft(ctx context.Context, t *testing.T, net *Network, nodes ...*Node) {
	for _, n := range nodes {
		start := time.Now()
		if err := n.Poweroff(ctx); err != nil {
			t.Errorf("%s: %v", n.Name(), err)
		}
		t.Logf("%s: poweroff took %v", n.Name(), time.Since(start).Round(10*time.Millisecond))
	}
	for _, n := range nodes {
		if err := n.Close(); err != nil {
			t.Errorf("%s: %v", n.Name(), err)
		}
	}
	if err := net.Close(); err != nil {
		t.Errorf("network: %v", err)
	}
	assertNothingLeft(t, net, nodes...)
}

// assertNothingLeft looks on the host for anything of a network's and its
// nodes': namespaces, cgroups, mounts, directories, processes.
func assertNothingLeft(t *testing.T, net *Network, nodes ...*Node) {
	t.Helper()
	netns, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(netns), net.Namespace()) {
		t.Errorf("the network's namespace %s is left", net.Namespace())
	}
	for _, n := range nodes {
		if strings.Contains(string(netns), n.Netns()) {
			t.Errorf("%s: network namespace %s is left", n.Name(), n.Netns())
		}
		if cgs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", cgroupParent, n.CgroupName())); len(cgs) > 0 {
			t.Errorf("%s: cgroups left: %v", n.Name(), cgs)
		}
		if strings.Contains(string(mountinfo), n.Dir()) {
			t.Errorf("%s: mounts left under %s", n.Name(), n.Dir())
		}
		if _, err := os.Stat(n.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: directory %s is left (%v)", n.Name(), n.Dir(), err)
		}
		// A killed process lingers as a zombie until its parent reaps it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := eventually(ctx, "no process of "+n.Name(), func() (bool, string, error) {
			pids := processesOf(n)
			return len(pids) == 0, fmt.Sprint(pids), nil
		})
		cancel()
		if err != nil {
			t.Errorf("%s: %v", n.Name(), err)
		}
	}
	if _, err := os.Stat(filepath.Join(ownersDir, net.id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the network's owner record is left (%v)", err)
	}
}

// TestStaleNodesAreSwept checks that what a killed test process leaves
// (go test's -timeout panics without running t.Cleanup) is removed by the
// next: running containers, mounts, namespaces, cgroups.
func TestStaleNodesAreSwept(t *testing.T) {
	n := StartNode(t, NodeConfig{Name: "stale"})
	// As if the owner had died: no live process has this ID.
	if err := os.WriteFile(filepath.Join(ownersDir, n.net.id, "owner"), []byte("999999999:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeStale(n.net.id); err != nil {
		t.Fatalf("sweeping: %v", err)
	}
	assertNothingLeft(t, n.net, n)
	if err := n.Close(); err != nil {
		t.Errorf("closing a swept node: %v", err)
	}
}

// processesOf lists the host's processes that belong to a node: in one of
// its cgroups, or running from its directory.
func processesOf(n *Node) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, p := range procs {
		cg, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		if strings.Contains(string(cg), cgroupParent+"/"+n.CgroupName()) || strings.Contains(string(cmdline), n.Dir()) {
			out = append(out, filepath.Base(p)+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// hostAddress is the host's source address towards the outside world, if
// it has one, which a node must not reach.
func hostAddress() string {
	out, err := exec.Command("ip", "route", "get", "1.1.1.1").Output()
	if err != nil {
		return ""
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "src" {
			return f[i+1]
		}
	}
	return ""
}

func copyInFile(ctx context.Context, t *testing.T, n *Node, nodePath string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(src, []byte("copied in\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.CopyIn(ctx, src, nodePath); err != nil {
		t.Fatalf("copy in: %v", err)
	}
	mode := trimmed(ctx, t, n, "stat", "-c", "%a", nodePath)
	if mode != strconv.FormatInt(0o600, 8) {
		t.Errorf("%s has mode %s in the node, want 600", nodePath, mode)
	}
}

// trimmed runs a command in the node, failing the test if it fails.
func trimmed(ctx context.Context, t *testing.T, n *Node, cmd ...string) string {
	t.Helper()
	out, err := n.Run(ctx, cmd...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return strings.TrimSpace(out)
}

func mustOutput(ctx context.Context, t *testing.T, n *Node, want string, cmd ...string) {
	t.Helper()
	if got := trimmed(ctx, t, n, cmd...); got != want {
		t.Errorf("%s: %s = %q, want %q", n.Name(), strings.Join(cmd, " "), got, want)
	}
}
