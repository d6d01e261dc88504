package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/cri/embedded/podnet/podnettest"
	"github.com/minilet/minilet/test/harness"
)

// hostNS is a private network and mount namespace standing in for a fresh
// host: the agent, its pods and the cleanup run there with the default
// CNI conf dir and IP store (/etc/cni/net.d and /var/lib/cni, each a
// tmpfs private to it) and its own iptables, links and default route, so
// that the before/after snapshot sees this agent alone while other tests
// run. Cgroups are the machine's (under a cgroup root of the test's own).
type hostNS struct {
	t      *testing.T
	holder *exec.Cmd
}

// newHostNS starts the namespace with an uplink whose MTU is mtu and a
// default route through it. The mount points /etc/cni/net.d and
// /var/lib/cni are created on the machine if missing (empty directories).
func newHostNS(t *testing.T, mtu int) *hostNS {
	t.Helper()
	for _, d := range []string{"/etc/cni/net.d", "/var/lib/cni"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	holder := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	h := &hostNS{t: t, holder: holder}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	// unshare has set up the namespaces once it has exec'd sleep.
	harness.Eventually(t, "the namespace holder runs", func() (bool, string) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", holder.Process.Pid))
		return strings.HasSuffix(exe, "/sleep"), exe
	})
	for _, args := range [][]string{
		{"mount", "-t", "tmpfs", "cni-conf", "/etc/cni/net.d"},
		{"mount", "-t", "tmpfs", "cni-state", "/var/lib/cni"},
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "uplink0", "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", "uplink1"},
		{"ip", "addr", "add", "192.0.2.10/24", "dev", "uplink0"},
		{"ip", "link", "set", "uplink0", "up"},
		{"ip", "link", "set", "uplink1", "up"},
		{"ip", "route", "add", "default", "via", "192.0.2.1", "dev", "uplink0", "onlink"},
	} {
		h.run(args...)
	}
	return h
}

// cmd is a command in the namespace.
func (h *hostNS) cmd(args ...string) *exec.Cmd {
	pid := fmt.Sprint(h.holder.Process.Pid)
	return exec.Command("nsenter", append([]string{"--target", pid, "--net", "--mount", "--"}, args...)...)
}

// run runs a command in the namespace and fails the test if it fails.
func (h *hostNS) run(args ...string) string {
	h.t.Helper()
	out, err := h.cmd(args...).CombinedOutput()
	if err != nil {
		h.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// snapshot is what the host shows of the changes an agent can make: links,
// iptables chains and rules, the CNI conf dir and IP store, the cgroup
// root in every hierarchy and its lock, and the agent's directories.
func (h *hostNS) snapshot(cgroupRoot string, dirs ...string) string {
	h.t.Helper()
	var lines []string
	for _, l := range strings.Split(h.run("ip", "-o", "link", "show"), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			lines = append(lines, "link "+strings.SplitN(f[1], "@", 2)[0])
		}
	}
	for _, l := range strings.Split(h.run("iptables-save"), "\n") {
		// Custom chains and rules; a table's header and its built-in
		// chains' policies show once anything has looked at the table.
		if strings.HasPrefix(l, "-") || (strings.HasPrefix(l, ":") && !builtinChain(l)) {
			lines = append(lines, "iptables "+l)
		}
	}
	for _, l := range strings.Split(h.run("find", "/etc/cni/net.d", "/var/lib/cni"), "\n") {
		if l != "" {
			lines = append(lines, "file "+l)
		}
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	for _, p := range hierarchies {
		if d := filepath.Join(filepath.Dir(p), cgroupRoot); exists(d) {
			lines = append(lines, "cgroup "+d)
		}
	}
	for _, p := range append(dirs, cm.LockFile(cm.DefaultLockDir, cgroupRoot)) {
		if exists(p) {
			lines = append(lines, "path "+p)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// cgroupProcs lists the processes in dir and the cgroups below it.
func cgroupProcs(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			out = append(out, strings.Fields(string(b))...)
		}
		return nil
	})
	return out
}

func builtinChain(l string) bool {
	for _, c := range []string{"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"} {
		if strings.HasPrefix(l, ":"+c+" ") {
			return true
		}
	}
	return false
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// A newcomer's first run, on a host that stands in for a fresh one: the
// example pods run, yet none of them, as its own user, can read the
// agent's keys, and the web example's host port serves its page and
// nothing of the host's; a pod's interface has the MTU of the host's
// default route (1360 here, neither the bridge plugin's 1500 nor this
// machine's); and once the pods are deleted and the agent stopped,
// `minilet cleanup` with the same flags leaves the host as it was found
// (links, iptables, CNI files, cgroups, locks, directories), while it
// refuses to run under a live agent.
func TestNewcomerRunIsSafeAndCleanupLeavesNoTrace(t *testing.T) {
	requireRoot(t)
	for _, tool := range []string{"unshare", "nsenter", "ip", "iptables-save", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed: %v", tool, err)
		}
	}
	const mtu = 1360
	ns := newHostNS(t, mtu)
	bin, cniBin := harness.Binary(t), podnettest.BinDir(t)
	base := t.TempDir()
	// Open to everyone, as /var/lib is: only the root dir's own mode
	// keeps pods away from the keys.
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	root, manifests := filepath.Join(base, "root"), filepath.Join(base, "pods")
	cgroupRoot := fmt.Sprintf("/minilet-newcomer-%d", os.Getpid())
	plugins := filepath.Join(base, "device-plugins")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Glob("../../examples/pods/*.yaml")
	for _, f := range examples {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(manifests, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const node = "newcomer"
	flags := []string{"--root-dir", root, "--cgroup-root", cgroupRoot, "--device-plugin-dir", plugins,
		"--pod-manifest-path", manifests, "--cni-bin-dir", cniBin, "--hostname-override", node,
		"--port", "0", "--read-only-port", "0"}
	before := ns.snapshot(cgroupRoot, root, plugins)

	var logs bytes.Buffer
	var agent *exec.Cmd
	var exited chan error
	startAgent := func() {
		agent = ns.cmd(append([]string{bin, "run"}, flags...)...)
		agent.Stdout, agent.Stderr = &logs, &logs
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		exited = make(chan error, 1)
		go func(c *exec.Cmd, done chan error) { done <- c.Wait() }(agent, exited)
	}
	stopAgent := func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = agent.Process.Kill()
			<-exited
		}
	}
	startAgent()
	t.Cleanup(func() {
		if agent.ProcessState == nil {
			stopAgent()
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
		// Whatever the test left: pods, cgroups, networks.
		_, _ = ns.cmd(append([]string{bin, "cleanup", "--stop-pods"}, flags...)...).CombinedOutput()
	})
	cli := func(args ...string) (string, error) {
		out, err := ns.cmd(append([]string{bin, "--root-dir", root}, args...)...).CombinedOutput()
		return string(out), err
	}
	pods := func() map[string]v1.Pod {
		out, err := cli("get", "pods", "-o", "json")
		var list v1.PodList
		if err != nil || json.Unmarshal([]byte(out), &list) != nil {
			return nil
		}
		m := map[string]v1.Pod{}
		for _, p := range list.Items {
			m[p.Name] = p
		}
		return m
	}
	harness.Eventually(t, "the examples run: web Ready, writer Running, job Succeeded", func() (bool, string) {
		ps := pods()
		web, writer, job := ps["web-"+node], ps["writer-"+node], ps["job-"+node]
		return ready(web) && writer.Status.Phase == v1.PodRunning && job.Status.Phase == v1.PodSucceeded,
			fmt.Sprintf("web %s ready=%v, writer %s, job %s", web.Status.Phase, ready(web), writer.Status.Phase, job.Status.Phase)
	})
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("root dir mode = %v, %v; want 0700", fi.Mode(), err)
	}

	key := filepath.Join(root, "pki", "local-admin.key")
	for pod, ctr := range map[string]string{"web-" + node: "server", "writer-" + node: "writer"} {
		if out, err := cli("exec", pod, "-c", ctr, "--", "id", "-u"); err != nil || strings.TrimSpace(out) != "65534" {
			t.Errorf("%s runs as %q (%v), want nobody (65534)", pod, out, err)
		}
		for _, args := range [][]string{{"cat", key}, {"ls", filepath.Join(root, "pki")}} {
			out, err := cli(append([]string{"exec", pod, "-c", ctr, "--"}, args...)...)
			if err == nil || strings.Contains(out, "PRIVATE KEY") || !strings.Contains(out, "Permission denied") {
				t.Errorf("in %s, %s: %v, %s; want Permission denied", pod, strings.Join(args, " "), err, out)
			}
		}
	}
	get := `import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen("http://192.0.2.10:18080" + sys.argv[1], timeout=10); print(r.status); print(r.read().decode(errors="replace"))
except urllib.error.HTTPError as e:
    print(e.code)`
	if out := ns.run("python3", "-c", get, "/"); !strings.HasPrefix(out, "200") || !strings.Contains(out, "Hello from web-"+node) {
		t.Errorf("web's host port: %q, want its own page", out)
	}
	for _, path := range []string{"/pki/local-admin.key", "/root/pki/local-admin.key", key, "/../../" + key, strings.TrimPrefix(key, os.TempDir()), "/etc/shadow"} {
		if out := ns.run("python3", "-c", get, path); strings.HasPrefix(out, "200") || strings.Contains(out, "PRIVATE KEY") {
			t.Errorf("web's host port served %s: %q", path, out)
		}
	}
	// SIOCGIFMTU on the pod's eth0, in its own network namespace (the host
	// image's /sys is the host's, so /sys/class/net would not tell).
	ioctl := `import socket, fcntl, struct; s = socket.socket(); print(struct.unpack("16si20x", fcntl.ioctl(s, 0x8921, struct.pack("16si20x", b"eth0", 0)))[1])`
	if out, err := cli("exec", "web-"+node, "--", "python3", "-c", ioctl); err != nil || strings.TrimSpace(out) != fmt.Sprint(mtu) {
		t.Errorf("the pod's eth0 MTU = %q (%v), want the default route's %d", out, err, mtu)
	}

	cleanup := func() (string, error) {
		out, err := ns.cmd(append([]string{bin, "cleanup"}, flags...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := cleanup(); err == nil || !strings.Contains(out, "an agent is running") {
		t.Errorf("cleanup under a running agent: %v\n%s\nwant a refusal", err, out)
	}
	// Stopped, the agent leaves its pods running: cleanup refuses to end
	// them unasked, and the next start adopts them.
	stopAgent()
	if out, err := cleanup(); err == nil || !strings.Contains(out, "web-"+node) || !strings.Contains(out, "--stop-pods") {
		t.Errorf("cleanup under running pods: %v\n%s\nwant a refusal naming web and --stop-pods", err, out)
	}
	startAgent()
	for _, f := range examples {
		if err := os.Remove(filepath.Join(manifests, filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, "the example pods are gone, their processes too", func() (bool, string) {
		ps := pods()
		procs := cgroupProcs(filepath.Join("/sys/fs/cgroup/pids", cgroupRoot, "kubepods"))
		return ps != nil && len(ps) == 0 && len(procs) == 0, fmt.Sprint(len(ps), " pods, processes ", procs)
	})
	stopAgent()
	out, err := cleanup()
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	t.Logf("cleanup:\n%s", out)
	if after := ns.snapshot(cgroupRoot, root, plugins); after != before {
		t.Errorf("the host after cleanup differs from before the agent ran:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
