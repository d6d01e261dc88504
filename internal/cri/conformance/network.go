package conformance

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/nodeaddr"
)

// networkServer answers every request with its hostname, on port, as a
// bare HTTP/1.0 server: only python3's socket module, which even a
// minimal python has.
func networkServer(port int) []string {
	return []string{"python3", "-c", fmt.Sprintf(`
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", %d))
s.listen(16)
body = socket.gethostname().encode()
while True:
    c, _ = s.accept()
    try:
        c.recv(4096)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    finally:
        c.close()
`, port)}
}

// networkClient fetches http://ip:port/ from inside a container and prints
// the body, with the socket module only.
func networkClient(ip string, port int) []string {
	return []string{"python3", "-c", fmt.Sprintf(`
import socket
c = socket.create_connection(("%s", %d), timeout=10)
c.sendall(b"GET / HTTP/1.0\r\n\r\n")
data = b""
while True:
    chunk = c.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.split(b"\r\n\r\n", 1)[1].decode())
`, ip, port)}
}

// testPodNetwork: pods off the host network get an IP of their own, their
// hostname, and their own ports (both listen on one port); the host
// reaches them by pod IP and a host port, and they reach each other.
func (s *suite) testPodNetwork(t *testing.T) {
	rt := s.runtime(t)
	ctx := context.Background()
	const port = 8080
	hostPort := freePort(t)
	pods := make([]*pod, 2)
	for i := range pods {
		pods[i] = s.newPodWith(t, rt, nil, func(c *runtimeapi.PodSandboxConfig) {
			c.Hostname = fmt.Sprintf("%s-net%d", c.GetMetadata().GetName(), i)
			c.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}}
			if i == 1 {
				c.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: port, HostPort: int32(hostPort)}}
			}
		})
	}
	var ips []string
	var ids []string
	for i, p := range pods {
		st, err := rt.PodSandboxStatus(ctx, p.id, false)
		if err != nil {
			t.Fatal(err)
		}
		ip := st.GetStatus().GetNetwork().GetIp()
		if net.ParseIP(ip) == nil {
			t.Fatalf("pod %d has no IP: %q", i, ip)
		}
		if st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork() != runtimeapi.NamespaceMode_POD {
			t.Errorf("pod %d network mode %v, want POD", i, st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork())
		}
		ips = append(ips, ip)
		ids = append(ids, s.run(t, rt, p, s.containerConfig("web", networkServer(port)...)))
		waitState(t, rt, ids[i], runtimeapi.ContainerState_CONTAINER_RUNNING)
	}
	node := nodeaddr.Detect(nil, "").IP
	if ips[0] == ips[1] || ips[0] == node {
		t.Fatalf("pod IPs %v, want two addresses of their own (the node's is %s)", ips, node)
	}
	for i, p := range pods {
		if got := fetch(t, fmt.Sprintf("http://%s:%d/", ips[i], port)); got != p.config.Hostname {
			t.Errorf("pod %d at its IP answered %q, want its hostname %q", i, got, p.config.Hostname)
		}
	}
	if got := fetch(t, fmt.Sprintf("http://%s:%d/", node, hostPort)); got != pods[1].config.Hostname {
		t.Errorf("host port %d answered %q, want pod 1 (%q)", hostPort, got, pods[1].config.Hostname)
	}
	out, _, err := rt.ExecSync(ctx, ids[1], networkClient(ips[0], port), 30*time.Second)
	if err != nil || strings.TrimSpace(string(out)) != pods[0].config.Hostname {
		t.Errorf("pod 1 fetching pod 0 by IP: %q %v", out, err)
	}
}

// fetch GETs url until it answers or waitTimeout passes.
func fetch(t *testing.T, url string) string {
	t.Helper()
	var body string
	waitFor(t, "GET "+url, func() bool {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		data, _ := io.ReadAll(resp.Body)
		body = string(data)
		return true
	})
	return body
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
