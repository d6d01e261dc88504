package embedded

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

// pythonServer serves dir's files on port from inside a host-image
// container, printing "serving" first.
func pythonServer(name string, port int) *runtimeapi.ContainerConfig {
	return hostContainer(name, "python3", "-c", fmt.Sprintf(`
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        import socket
        body = socket.gethostname().encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
socketserver.TCPServer.allow_reuse_address = True
s = socketserver.TCPServer(("0.0.0.0", %d), H)
print("serving", flush=True)
s.serve_forever()
`, port))
}

// get fetches url, retrying until the deadline (the server starts
// asynchronously).
func get(t *testing.T, url string) string {
	t.Helper()
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			return string(body)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("GET %s: %v", url, last)
	return ""
}

// Two pods off the host network each get a network namespace of their
// own with an IP from the CNI network, their hostname, and their own
// ports: both listen on one port without clashing, reach each other and
// are reached from the host by pod IP, and a host port reaches one from
// the host. Removing a pod leaves no veth, IP reservation or iptables rule.
func TestPodNetworkNamespaces(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	r := newTestRuntime(t, t.TempDir())
	const port = 8080
	hostPort := freeTCPPort(t)

	sbA, cfgA := testSandbox(t, r)
	sbB, cfgB := testSandboxWithPorts(t, r, []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: port, HostPort: int32(hostPort)}})
	ipA, ipB := sandboxIP(t, r, sbA), sandboxIP(t, r, sbB)
	if ipA == r.nodeIP || ipB == r.nodeIP || ipA == ipB || net.ParseIP(ipA) == nil {
		t.Fatalf("pod IPs %q and %q, want two distinct addresses that are not the node's %s", ipA, ipB, r.nodeIP)
	}
	a := startContainer(t, r, sbA, pythonServer("web", port))
	b := startContainer(t, r, sbB, pythonServer("web", port))

	if got := get(t, fmt.Sprintf("http://%s:%d/", ipA, port)); got != cfgA.Hostname {
		t.Errorf("pod A answered %q, want its hostname %q", got, cfgA.Hostname)
	}
	if got := get(t, fmt.Sprintf("http://%s:%d/", ipB, port)); got != cfgB.Hostname {
		t.Errorf("pod B answered %q, want its hostname %q", got, cfgB.Hostname)
	}
	// Pod to pod, by pod IP, from an exec in pod B.
	out, _, err := r.ExecSync(ctx, b, []string{"python3", "-c", fmt.Sprintf("import urllib.request; print(urllib.request.urlopen('http://%s:%d/', timeout=10).read().decode())", ipA, port)}, 30*time.Second)
	if err != nil || strings.TrimSpace(string(out)) != cfgA.Hostname {
		t.Errorf("pod B fetching pod A: %q %v, want %q", out, err, cfgA.Hostname)
	}
	// The pod's own loopback is up: its server answers on 127.0.0.1.
	out, _, err = r.ExecSync(ctx, a, []string{"python3", "-c", fmt.Sprintf("import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:%d/', timeout=10).read().decode())", port)}, 30*time.Second)
	if err != nil || strings.TrimSpace(string(out)) != cfgA.Hostname {
		t.Errorf("pod A fetching its own loopback: %q %v, want %q", out, err, cfgA.Hostname)
	}
	// The exec sees its pod's interfaces and hostname.
	out, _, err = r.ExecSync(ctx, a, []string{"sh", "-c", "hostname; cat /proc/net/dev | grep -c eth0"}, 30*time.Second)
	if err != nil || string(out) != cfgA.Hostname+"\n1\n" {
		t.Errorf("exec in pod A: %q %v, want its hostname and one eth0", out, err)
	}
	// The host's end of each pod's eth0, which must go with the pod.
	var hostEnds []int
	for _, id := range []string{a, b} {
		// "2: eth0@if17: <...": the peer's index on the host. (A
		// host-image container sees the host's /sys, so not iflink.)
		out, _, err := r.ExecSync(ctx, id, []string{"ip", "-o", "link", "show", "eth0"}, 30*time.Second)
		_, rest, _ := strings.Cut(string(out), "@if")
		digits, _, _ := strings.Cut(rest, ":")
		n, perr := strconv.Atoi(digits)
		if err != nil || perr != nil {
			t.Fatalf("ip link show eth0: %q %v", out, err)
		}
		if _, err := net.InterfaceByIndex(n); err != nil {
			t.Fatalf("the host end (index %d) of a pod's eth0: %v", n, err)
		}
		hostEnds = append(hostEnds, n)
	}
	// The host port, from the host.
	if got := get(t, fmt.Sprintf("http://%s:%d/", r.nodeIP, hostPort)); got != cfgB.Hostname {
		t.Errorf("host port %d answered %q, want pod B (%q)", hostPort, got, cfgB.Hostname)
	}

	for _, sb := range []string{sbA, sbB} {
		if err := r.StopPodSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if err := r.RemovePodSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range hostEnds {
		if ifc, err := net.InterfaceByIndex(n); err == nil {
			t.Errorf("veth %s (index %d) remains after its pod was removed", ifc.Name, n)
		}
	}
	for _, ip := range []string{ipA, ipB} {
		if _, err := os.Stat("/var/lib/cni/networks/minilet/" + ip); err == nil {
			t.Errorf("IP %s is still reserved after its pod was removed", ip)
		}
	}
	rules, _ := exec.Command("iptables-save").Output()
	for _, sb := range []string{sbA, sbB} {
		if strings.Contains(string(rules), sb) {
			t.Errorf("iptables rules of removed sandbox %s remain", sb)
		}
	}
}

// A pod on the host's network has the node's IP and hostname.
func TestHostNetworkPod(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	sb, _ := testSandboxWith(t, r, hostNamespaces)
	if ip := sandboxIP(t, r, sb); ip != r.nodeIP {
		t.Errorf("host-network pod IP %s, want the node's %s", ip, r.nodeIP)
	}
	id := startContainer(t, r, sb, hostContainer("c", "sleep", "1000"))
	host, _ := os.Hostname()
	out, _, err := r.ExecSync(context.Background(), id, []string{"hostname"}, 30*time.Second)
	if err != nil || strings.TrimSpace(string(out)) != host {
		t.Errorf("hostname in a host-network pod: %q %v, want %q", out, err, host)
	}
}

func testSandboxWithPorts(t *testing.T, r *Runtime, ports []*runtimeapi.PortMapping) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	n := sandboxSeq.Add(1)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "ports", Namespace: "test", Uid: fmt.Sprintf("u%d", n)},
		Hostname:     fmt.Sprintf("ports%d", n),
		LogDirectory: t.TempDir(),
		PortMappings: ports,
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: fmt.Sprintf("/minilet-embedded-test-ports-%d-%d", os.Getpid(), n),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}}},
	}
	id, err := r.RunPodSandbox(context.Background(), cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		_ = r.RemovePodSandbox(context.Background(), id)
		removeCgroupDirs(r, cfg.Linux.CgroupParent)
	})
	return id, cfg
}

func sandboxIP(t *testing.T, r *Runtime, id string) string {
	t.Helper()
	st, err := r.PodSandboxStatus(context.Background(), id, false)
	if err != nil {
		t.Fatal(err)
	}
	return st.GetStatus().GetNetwork().GetIp()
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// With shareProcessNamespace (PID mode POD) the pod's containers share one
// PID namespace, whose PID 1 is the pod's pause; removing the sandbox ends
// the pause.
func TestSharedPIDNamespace(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	ctx := context.Background()
	loadProbeImage(t, r, "example.com/probe:1", v1.Config{Entrypoint: []string{"/bin/probe"}, Env: []string{"PATH=/bin"}})
	sb, _ := testSandboxWith(t, r, &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD})
	st, err := r.PodSandboxStatus(ctx, sb, false)
	if err != nil || st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetPid() != runtimeapi.NamespaceMode_POD {
		t.Fatalf("sandbox status %v %v, want pid mode POD", st, err)
	}
	a := startContainer(t, r, sb, imageContainerConfig("a", "example.com/probe:1", nil, []string{"sleep"}))
	b := startContainer(t, r, sb, imageContainerConfig("b", "example.com/probe:1", nil, []string{"sleep"}))
	for _, id := range []string{a, b} {
		out, _, err := r.ExecSync(ctx, id, []string{"probe", "cat", "/proc/1/cmdline"}, 20*time.Second)
		if err != nil || !strings.HasPrefix(string(out), monitorproc.PauseArg0) {
			t.Errorf("PID 1 seen from container %s: %q %v, want the pod's pause", id[:8], out, err)
		}
	}
	rec, _ := r.sandboxes.Get(sb)
	if rec.PausePID == 0 || !pauseAlive(&rec) {
		t.Fatalf("no live pause recorded: %+v", rec)
	}
	if err := r.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the pause to end", func() bool { return !pauseAlive(&rec) })
}
