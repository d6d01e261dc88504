package clustertest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
)

// startComponents starts kube-controller-manager and kube-scheduler as a
// real cluster runs them: each with its own identity (a client certificate
// for system:kube-controller-manager or system:kube-scheduler, which the
// API server's bootstrap RBAC policy grants what they need), serving HTTPS
// on a free loopback port with a certificate of the harness CA, checking
// requests to it against the API server (authentication and authorization
// kubeconfigs), and with leader election as by default. It waits until both
// answer /healthz.
func (s *Server) startComponents() {
	s.t.Helper()
	kcm := s.launch(clusterbin.ControllerManager)
	sched := s.launch(clusterbin.Scheduler)
	for _, c := range []*component{kcm, sched} {
		s.waitHTTP(c.name, c.p, c.healthz, c.client)
	}
}

// StartComponent starts component name (clusterbin.ControllerManager or
// clusterbin.Scheduler) again after StopComponent, or after it exited on
// its own, and waits until it answers /healthz; a running one is left
// alone. Both exit when they lose their leader-election lease, e.g. when
// the API server is gone for longer than their renew deadline (10 s), and
// a real cluster's kubelet then restarts their static pods; tests do that
// with this. Needs Options.ControlPlane.
func (s *Server) StartComponent(name string) {
	s.t.Helper()
	if !s.full {
		s.t.Fatalf("StartComponent(%s): the server was started without Options.ControlPlane", name)
	}
	if s.ComponentRunning(name) {
		return
	}
	s.StopComponent(name) // closes what an exited process left open
	c := s.launch(name)
	s.waitHTTP(c.name, c.p, c.healthz, c.client)
}

// StopComponent stops component name (clusterbin.ControllerManager or
// clusterbin.Scheduler), if it runs.
func (s *Server) StopComponent(name string) {
	s.mu.Lock()
	c := s.comps[name]
	delete(s.comps, name)
	s.mu.Unlock()
	if c != nil {
		c.p.stop()
	}
}

// ComponentRunning reports whether component name's process is running:
// false before it was started, after StopComponent, and once it exited on
// its own.
func (s *Server) ComponentRunning(name string) bool {
	s.mu.Lock()
	c := s.comps[name]
	s.mu.Unlock()
	if c == nil {
		return false
	}
	select {
	case <-c.p.done:
		return false
	default:
		return true
	}
}

// launch starts component name with its identity and flags, replacing the
// record of an earlier process of it (which must have ended).
func (s *Server) launch(name string) *component {
	s.t.Helper()
	switch name {
	case clusterbin.ControllerManager:
		return s.component(name, "system:kube-controller-manager",
			// Controllers act under their own service accounts, whose tokens
			// the API server issues and checks with sa.key.
			"--use-service-account-credentials",
			"--service-account-private-key-file", filepath.Join(s.dir, "sa.key"),
			// kube-root-ca.crt in every namespace, and the CA in token secrets.
			"--root-ca-file", s.CAFile,
			// The CSR signer (kubernetes.io/kube-apiserver-client-kubelet and
			// the other built-in signers) signs with the cluster CA.
			"--cluster-signing-cert-file", s.CAFile,
			"--cluster-signing-key-file", filepath.Join(s.dir, "ca.key"),
			"--service-cluster-ip-range", "10.0.0.0/24",
			"--cluster-signing-duration", s.signingDuration(),
		)
	case clusterbin.Scheduler:
		return s.component(name, "system:kube-scheduler")
	}
	s.t.Fatalf("no control-plane component %q", name)
	return nil
}

type component struct {
	name    string
	p       *proc
	healthz string
	client  *http.Client
}

// component starts binary name as user cn with the flags every component
// takes, plus extra.
func (s *Server) component(name, cn string, extra ...string) *component {
	s.t.Helper()
	kc := s.CertKubeconfig(name, cn)
	crt, key, err := s.ca.issue(name, nil, true)
	check(s.t, err, "serving certificate for %s", name)
	crtPath, keyPath := filepath.Join(s.dir, name+"-serving.crt"), filepath.Join(s.dir, name+"-serving.key")
	check(s.t, os.WriteFile(crtPath, crt, 0o644), "writing serving cert")
	check(s.t, os.WriteFile(keyPath, key, 0o600), "writing serving key")
	port := freePort(s.t)
	args := append([]string{
		"--kubeconfig", kc,
		"--authentication-kubeconfig", kc,
		"--authorization-kubeconfig", kc,
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(port),
		"--tls-cert-file", crtPath,
		"--tls-private-key-file", keyPath,
	}, extra...)
	p := s.run(s.bins.Path(name), args, name+".log")
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.cert)
	c := &component{
		name:    name,
		p:       p,
		healthz: fmt.Sprintf("https://127.0.0.1:%d/healthz", port),
		client: &http.Client{
			Timeout:   5 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		},
	}
	s.mu.Lock()
	if s.comps == nil {
		s.comps = map[string]*component{}
	}
	s.comps[name] = c
	s.mu.Unlock()
	return c
}

func (s *Server) stopComponents() {
	s.mu.Lock()
	comps := s.comps
	s.comps = nil
	s.mu.Unlock()
	for _, c := range comps {
		c.p.stop()
	}
}

// WaitNamespaceReady waits until namespace ns has the default
// ServiceAccount and the kube-root-ca.crt ConfigMap, which the
// controller-manager creates in every namespace (Options.ControlPlane).
func (s *Server) WaitNamespaceReady(ns string) {
	s.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		_, err := s.Admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			_, err = s.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		}
		if err == nil {
			return
		}
		last = err.Error()
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("namespace %s: no default ServiceAccount and kube-root-ca.crt after 90s: %s", ns, last)
}

// KubectlCommand is kubectl ARGS as the cluster admin, to run in the
// background or with its streams and environment set.
func (s *Server) KubectlCommand(args ...string) *exec.Cmd {
	s.t.Helper()
	return exec.Command(s.bins.Path(clusterbin.Kubectl), append([]string{"--kubeconfig", s.AdminKubeconfig()}, args...)...)
}

// AdminKubeconfig writes (once) and returns a kubeconfig with system:masters
// rights, for kubectl and other clients run as processes.
func (s *Server) AdminKubeconfig() string {
	s.t.Helper()
	path := filepath.Join(s.dir, "admin.kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	return s.writeKubeconfig("admin", "    token: "+s.admin+"\n")
}

// Kubectl runs the upstream kubectl as the admin against the server and
// returns its combined output.
func (s *Server) Kubectl(args ...string) (string, error) {
	s.t.Helper()
	out, err := s.KubectlCommand(args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w", args, err)
	}
	return string(out), nil
}
