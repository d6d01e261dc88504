package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// Pods off the host network, through the real agent: each gets an IP of
// the CNI network in status.podIP (not the node's), its own hostname, the
// kubelet's /etc/hosts and resolv.conf; two pods listen on one port
// without a clash, reach each other by pod IP, and one is reached on the
// node's hostPort. A hostNetwork pod keeps the node's IP and hostname.
func TestPodsGetTheirOwnNetwork(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.ExtraArgs = append(a.ExtraArgs, "--cluster-dns", "10.96.0.10", "--cluster-domain", "cluster.local")
	a.Start()
	port, hostPort := harness.FreePort(t), harness.FreePort(t)
	server := fmt.Sprintf(`["python3", "-c", "import http.server, socket; H = type('H', (http.server.BaseHTTPRequestHandler,), {'do_GET': lambda s: (s.send_response(200), s.end_headers(), s.wfile.write(socket.gethostname().encode())), 'log_message': lambda *a: None}); http.server.HTTPServer(('0.0.0.0', %d), H).serve_forever()"]`, port)
	for _, name := range []string{"neta", "netb"} {
		ports := fmt.Sprintf("[{containerPort: %d}]", port)
		if name == "netb" {
			ports = fmt.Sprintf("[{containerPort: %d, hostPort: %d}]", port, hostPort)
		}
		a.WriteManifest(name+".yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  subdomain: web
  hostAliases: [{ip: 192.0.2.9, hostnames: [printer.example]}]
  containers:
  - name: web
    image: host
    command: %s
    ports: %s
    readinessProbe:
      tcpSocket: {port: %d}
      periodSeconds: 1
`, name, server, ports, port))
	}
	a.WriteManifest("hostnet.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: hostnet}
spec:
  hostNetwork: true
  containers:
  - {name: main, image: host, command: ["sleep", "100000"]}
`)
	node := a.Node()
	var nodeIP string
	for _, addr := range node.Status.Addresses {
		if addr.Type == v1.NodeInternalIP {
			nodeIP = addr.Address
		}
	}
	ips := map[string]string{}
	for _, name := range []string{"neta", "netb", "hostnet"} {
		static := a.Static(name)
		a.Eventually(static+" Ready with a pod IP", func() (bool, string) {
			p, ok := a.Pod(static)
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || (c.Type == v1.PodReady && c.Status == v1.ConditionTrue)
			}
			ips[name] = p.Status.PodIP
			return ok && ready && p.Status.PodIP != "" && len(p.Status.PodIPs) > 0, describe(p, ok) + " ip=" + p.Status.PodIP
		})
	}
	if ips["neta"] == nodeIP || ips["netb"] == nodeIP || ips["neta"] == ips["netb"] {
		t.Fatalf("pod IPs %v, want distinct addresses other than the node's %s", ips, nodeIP)
	}
	if ips["hostnet"] != nodeIP {
		t.Errorf("hostNetwork pod IP %s, want the node's %s", ips["hostnet"], nodeIP)
	}
	// Same port in both pods, each answering with its own hostname; from
	// the host by pod IP, and pod B on the node's host port.
	for name, url := range map[string]string{
		"neta": fmt.Sprintf("http://%s:%d/", ips["neta"], port),
		"netb": fmt.Sprintf("http://%s:%d/", ips["netb"], port),
	} {
		if got := httpGet(t, url); got != a.Static(name) {
			t.Errorf("%s answered %q, want its hostname %q", url, got, a.Static(name))
		}
	}
	if got := httpGet(t, fmt.Sprintf("http://%s:%d/", nodeIP, hostPort)); got != a.Static("netb") {
		t.Errorf("host port %d answered %q, want pod netb", hostPort, got)
	}
	// Pod to pod, and what the pod sees of its names.
	out, err := a.CLI("exec", a.Static("netb"), "--", "sh", "-c", fmt.Sprintf(
		`python3 -c "import urllib.request; print(urllib.request.urlopen('http://%s:%d/', timeout=10).read().decode())"; hostname; cat /etc/hosts /etc/resolv.conf`, ips["neta"], port))
	if err != nil {
		t.Fatalf("exec in netb: %v\n%s", err, out)
	}
	for _, want := range []string{
		a.Static("neta") + "\n" + a.Static("netb") + "\n",
		"# Kubernetes-managed hosts file.",
		ips["netb"] + "\t" + a.Static("netb") + ".web.default.svc.cluster.local\t" + a.Static("netb"),
		"192.0.2.9\tprinter.example",
		"search default.svc.cluster.local svc.cluster.local cluster.local",
		"nameserver 10.96.0.10",
		"options ndots:5",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exec in netb printed no %q:\n%s", want, out)
		}
	}
	host, _ := os.Hostname()
	if out, err := a.CLI("exec", a.Static("hostnet"), "--", "hostname"); err != nil || strings.TrimSpace(out) != host {
		t.Errorf("hostname in the hostNetwork pod: %q %v, want %q", out, err, host)
	}
}

// Pods created and deleted leave nothing of their network behind: no IP
// reserved in the pool, no iptables rule, no held namespace.
func TestDeletedPodsLeaveNoNetworkState(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	const n = 12
	for i := range n {
		a.WriteManifest(fmt.Sprintf("churn%02d.yaml", i), fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: churn%02d}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sleep", "100000"]
    ports: [{containerPort: 80, hostPort: %d}]
`, i, harness.FreePort(t)))
	}
	a.Eventually(fmt.Sprintf("%d pods Running with IPs", n), func() (bool, string) {
		running := 0
		for _, p := range a.Pods() {
			if p.Status.Phase == v1.PodRunning && p.Status.PodIP != "" {
				running++
			}
		}
		return running == n, fmt.Sprintf("%d Running", running)
	})
	entries, err := os.ReadDir(filepath.Join(a.RootDir, "runtime", "netns"))
	if err != nil || len(entries) < n {
		t.Fatalf("held pod namespaces: %d %v, want %d", len(entries), err, n)
	}
	var sandboxes []string
	for _, e := range entries {
		sandboxes = append(sandboxes, e.Name())
	}
	if rules := iptablesRules(t); !containsAny(rules, sandboxes) {
		t.Fatalf("no iptables rule names a sandbox while the pods run: the check below would prove nothing")
	}
	for i := range n {
		a.RemoveManifest(fmt.Sprintf("churn%02d.yaml", i))
	}
	a.Eventually("all pods gone and their network released", func() (bool, string) {
		if pods := a.Pods(); len(pods) > 0 {
			return false, fmt.Sprintf("%d pods left", len(pods))
		}
		if left, _ := os.ReadDir(filepath.Join(a.RootDir, "runtime", "netns")); len(left) > 0 {
			return false, fmt.Sprintf("%d pod namespace dirs left", len(left))
		}
		if rules := iptablesRules(t); containsAny(rules, sandboxes) {
			return false, "iptables rules of deleted pods remain"
		}
		if held := reservedBy(t, sandboxes); len(held) > 0 {
			return false, fmt.Sprintf("IPs still reserved: %v", held)
		}
		return true, ""
	})
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	var body string
	harness.Eventually(t, "GET "+url, func() (bool, string) {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		data, _ := io.ReadAll(resp.Body)
		body = string(data)
		return true, ""
	})
	return body
}

func iptablesRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Fatalf("iptables-save: %v", err)
	}
	return string(out)
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// reservedBy lists the IPs of the shared pool that one of ids holds.
func reservedBy(t *testing.T, ids []string) []string {
	t.Helper()
	dir := "/var/lib/cni/networks/minilet"
	entries, _ := os.ReadDir(dir)
	var held []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		owner, _, _ := strings.Cut(string(data), "\n")
		for _, id := range ids {
			if strings.TrimSpace(owner) == id {
				held = append(held, e.Name())
			}
		}
	}
	return held
}
