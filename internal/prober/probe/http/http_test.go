package http

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/prober/probe"
)

// server is a real HTTP server with the endpoints the tests probe. It
// remembers the headers of the last request.
type server struct {
	*httptest.Server
	mu      sync.Mutex
	headers http.Header
	host    string
	release chan struct{}
}

func newServer(t *testing.T, tls bool) *server {
	s := &server{release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers, s.host = r.Header.Clone(), r.Host
		s.mu.Unlock()
		fmt.Fprint(w, "fine")
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "sick", http.StatusInternalServerError) })
	mux.HandleFunc("/same-host", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/other-host", func(w http.ResponseWriter, r *http.Request) {
		// localhost is another host name than 127.0.0.1, so this leaves the host.
		_, port, _ := net.SplitHostPort(r.Host)
		http.Redirect(w, r, "http://localhost:"+port+"/ok", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("b", 1<<20)))
	})
	if tls {
		s.Server = httptest.NewTLSServer(mux)
	} else {
		s.Server = httptest.NewServer(mux)
	}
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.release) })
	return s
}

func (s *server) port() int { return s.Listener.Addr().(*net.TCPAddr).Port }

func request(t *testing.T, s *server, path string, scheme v1.URIScheme, headers ...v1.HTTPHeader) *http.Request {
	t.Helper()
	c := &v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(s.port())}}}
	req, err := NewRequest(&v1.HTTPGetAction{Path: path, Port: intstr.FromString("web"), Scheme: scheme, HTTPHeaders: headers}, c, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestProbe(t *testing.T) {
	s := newServer(t, false)
	p := New()
	tests := []struct {
		path    string
		timeout time.Duration
		want    probe.Result
		output  string
	}{
		{"/ok", 10 * time.Second, probe.Success, "fine"},
		{"/fail", 10 * time.Second, probe.Failure, "HTTP probe failed with statuscode: 500"},
		{"/same-host", 10 * time.Second, probe.Success, "fine"},
		{"/other-host", 10 * time.Second, probe.Warning, "Probe terminated redirects"},
		{"/loop", 10 * time.Second, probe.Failure, "stopped after 10 redirects"},
		{"/slow", 200 * time.Millisecond, probe.Failure, ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, out, err := p.Probe(context.Background(), request(t, s, tt.path, ""), tt.timeout)
			if err != nil || got != tt.want || !strings.Contains(out, tt.output) {
				t.Fatalf("Probe(%s) = %v %q %v, want %v containing %q", tt.path, got, out, err, tt.want, tt.output)
			}
		})
	}
}

func TestProbeBodyIsCapped(t *testing.T) {
	s := newServer(t, false)
	got, out, err := New().Probe(context.Background(), request(t, s, "/big", ""), 5*time.Second)
	if err != nil || got != probe.Success || len(out) != probe.MaxOutput {
		t.Fatalf("Probe = %v, %d bytes, %v; want success with %d bytes", got, len(out), err, probe.MaxOutput)
	}
}

func TestProbeHTTPSIsNotVerified(t *testing.T) {
	s := newServer(t, true)
	got, out, err := New().Probe(context.Background(), request(t, s, "/ok", v1.URISchemeHTTPS), 10*time.Second)
	if err != nil || got != probe.Success {
		t.Fatalf("Probe over TLS with a self-signed certificate = %v %q %v", got, out, err)
	}
}

func TestProbeHeaders(t *testing.T) {
	s := newServer(t, false)
	req := request(t, s, "/ok", "", v1.HTTPHeader{Name: "Host", Value: "example.test"}, v1.HTTPHeader{Name: "X-Probe", Value: "yes"})
	if got, _, err := New().Probe(context.Background(), req, 10*time.Second); err != nil || got != probe.Success {
		t.Fatalf("Probe = %v %v", got, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host != "example.test" {
		t.Errorf("Host = %q, want the header's example.test", s.host)
	}
	for name, want := range map[string]string{"User-Agent": probe.UserAgent, "Accept": "*/*", "X-Probe": "yes", "Connection": "close"} {
		if got := s.headers.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestProbeUserHeadersWin(t *testing.T) {
	s := newServer(t, false)
	req := request(t, s, "/ok", "", v1.HTTPHeader{Name: "User-Agent", Value: "mine"}, v1.HTTPHeader{Name: "Accept", Value: "text/plain"})
	if got, _, err := New().Probe(context.Background(), req, 10*time.Second); err != nil || got != probe.Success {
		t.Fatalf("Probe = %v %v", got, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.headers.Get("User-Agent") != "mine" || s.headers.Get("Accept") != "text/plain" {
		t.Fatalf("headers = %v, want the pod's User-Agent and Accept", s.headers)
	}
}

func TestProbeRefused(t *testing.T) {
	port := refusedPort(t)
	c := &v1.Container{Name: "app"}
	req, err := NewRequest(&v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(port))}, c, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	got, out, err := New().Probe(context.Background(), req, 10*time.Second)
	if err != nil || got != probe.Failure || out == "" {
		t.Fatalf("Probe = %v %q %v, want a failure", got, out, err)
	}
}

func TestNewRequest(t *testing.T) {
	c := &v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: 8080}}}
	req, err := NewRequest(&v1.HTTPGetAction{Path: "/healthz?full=1", Port: intstr.FromString("web"), Scheme: v1.URISchemeHTTPS}, c, "10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	if got := req.URL.String(); got != "https://10.0.0.7:8080/healthz?full=1" {
		t.Fatalf("URL = %s", got)
	}
	req, err = NewRequest(&v1.HTTPGetAction{Host: "svc.local", Port: intstr.FromInt32(81)}, c, "10.0.0.7")
	if err != nil || req.URL.String() != "http://svc.local:81" {
		t.Fatalf("URL = %v, %v; want the action's host", req.URL, err)
	}
	for name, a := range map[string]*v1.HTTPGetAction{
		"unknown named port": {Port: intstr.FromString("nope")},
		"port out of range":  {Port: intstr.FromInt32(70000)},
		"bad scheme":         {Port: intstr.FromInt32(80), Scheme: "FTP"},
	} {
		if _, err := NewRequest(a, c, "10.0.0.7"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := NewRequest(&v1.HTTPGetAction{Port: intstr.FromInt32(80)}, c, ""); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("no pod IP: err = %v, want ErrUnavailable", err)
	}
}

// refusedPort reserves a loopback port that refuses connections: a socket
// bound without SO_REUSEADDR and never listening, so no other listener can
// take the port while the test runs.
func refusedPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}
