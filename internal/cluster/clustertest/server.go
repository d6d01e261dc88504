package clustertest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/nodeaddr"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
)

// Options configures Start.
type Options struct {
	// TokenNodes get a bearer token for system:node:<name> in the static
	// token file (other nodes use client certificates).
	TokenNodes []string
	// ControlPlane also starts kube-controller-manager and kube-scheduler,
	// each with its own client certificate, so that the cluster does what
	// a real one does on its own: service accounts and kube-root-ca.crt in
	// every namespace, CSR signing, scheduling, garbage collection. Without
	// it the harness creates the default ServiceAccount and kube-root-ca.crt
	// itself, and pods are bound by hand (spec.nodeName).
	ControlPlane bool
	// SigningDuration, when set, is the lifetime of the certificates the
	// controller-manager signs (--cluster-signing-duration; default a
	// year), for tests of certificate rotation.
	SigningDuration time.Duration
}

// Server is a running etcd and kube-apiserver pair on loopback, with
// authorization Node,RBAC and the NodeRestriction admission plugin (on top
// of the API server's default admission plugins), and with
// Options.ControlPlane kube-controller-manager and kube-scheduler.
type Server struct {
	t   testing.TB
	dir string
	URL string // https://127.0.0.1:<port>
	// PodURL is the API server at the node's address, which pods on the
	// pod network reach (there is no kube-proxy for the service IP).
	PodURL   string
	CAFile   string
	ca       *authority
	tokens   map[string]string // node name → token
	admin    string            // admin token
	bins     clusterbin.Set
	apiArgs  []string
	etcdArgs []string
	full     bool
	signing  time.Duration

	mu    sync.Mutex
	api   *proc
	etcd  *proc
	comps map[string]*component // controller-manager and scheduler, by binary name

	// Admin is a client with system:masters rights.
	Admin kubernetes.Interface
	// AdminConfig is Admin's configuration.
	AdminConfig *rest.Config
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// Start builds (once) and runs etcd and kube-apiserver, and with
// opts.ControlPlane kube-controller-manager and kube-scheduler, and waits
// until they are ready and the default namespace has its ServiceAccount and
// kube-root-ca.crt ConfigMap (created by the controller-manager, or without
// one by the harness). Cleanup stops them all.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	SkipUnlessEnabled(t)
	bins := Binaries(t)
	dir, err := os.MkdirTemp("", "mlt-cluster")
	check(t, err, "temp dir")
	s := &Server{t: t, dir: dir, bins: bins, tokens: map[string]string{}, full: opts.ControlPlane, signing: opts.SigningDuration}
	t.Cleanup(func() {
		s.stopComponents()
		s.StopAPIServer()
		s.stopEtcd()
		if t.Failed() {
			for _, name := range []string{clusterbin.KubeAPIServer, clusterbin.ControllerManager, clusterbin.Scheduler} {
				if _, err := os.Stat(filepath.Join(dir, name+".log")); err == nil {
					t.Logf("%s log tail:\n%s", name, tail(filepath.Join(dir, name+".log"), 40))
				}
			}
		}
		_ = os.RemoveAll(dir)
	})
	s.writeFiles(opts)
	s.startEtcd()
	s.StartAPIServer()
	s.grantKubeletAPI()
	if s.full {
		s.startComponents()
	}
	s.bootstrap("default")
	return s
}

func randToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeFiles writes certificates, keys, the token file and the audit policy.
func (s *Server) writeFiles(opts Options) {
	t := s.t
	ca, err := newAuthority()
	check(t, err, "CA")
	s.ca = ca
	s.CAFile = filepath.Join(s.dir, "ca.crt")
	check(t, os.WriteFile(s.CAFile, ca.pem, 0o644), "writing CA")
	crt, key, err := ca.issue("kube-apiserver", nil, true)
	check(t, err, "serving cert")
	check(t, os.WriteFile(filepath.Join(s.dir, "apiserver.crt"), crt, 0o644), "writing cert")
	check(t, os.WriteFile(filepath.Join(s.dir, "apiserver.key"), key, 0o600), "writing key")
	check(t, writeRSAKey(filepath.Join(s.dir, "sa.key")), "service account key")
	check(t, os.WriteFile(filepath.Join(s.dir, "ca.key"), ca.keyPEM, 0o600), "writing CA key")
	// The API server's client certificate for kubelets (logs, exec,
	// port-forward, the node proxy), as kubeadm makes it.
	crt, key, err = ca.issue(KubeletClientUser, nil, false)
	check(t, err, "kubelet client cert")
	check(t, os.WriteFile(filepath.Join(s.dir, "kubelet-client.crt"), crt, 0o644), "writing cert")
	check(t, os.WriteFile(filepath.Join(s.dir, "kubelet-client.key"), key, 0o600), "writing key")

	s.admin = randToken()
	lines := []string{fmt.Sprintf("%s,admin,admin-uid,system:masters", s.admin)}
	for _, n := range opts.TokenNodes {
		tok := randToken()
		s.tokens[n] = tok
		lines = append(lines, fmt.Sprintf("%s,system:node:%s,node-%s,system:nodes", tok, n, n))
	}
	check(t, os.WriteFile(filepath.Join(s.dir, "tokens.csv"), []byte(strings.Join(lines, "\n")+"\n"), 0o600), "token file")
	policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"
	check(t, os.WriteFile(filepath.Join(s.dir, "audit-policy.yaml"), []byte(policy), 0o644), "audit policy")
}

// freePort asks the kernel for a free loopback port.
func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(t, err, "free port")
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

func (s *Server) startEtcd() {
	client, peer := freePort(s.t), freePort(s.t)
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	s.etcdArgs = []string{
		"--data-dir", filepath.Join(s.dir, "etcd"),
		"--listen-client-urls", clientURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
	}
	p := s.run(s.bins.Path(clusterbin.Etcd), s.etcdArgs, "etcd.log")
	s.mu.Lock()
	s.etcd = p
	s.mu.Unlock()
	s.waitHTTP("etcd", p, clientURL+"/health", nil)
	port := freePort(s.t)
	s.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	s.PodURL = fmt.Sprintf("https://%s", net.JoinHostPort(nodeaddr.Detect(nil, "").IP, strconv.Itoa(port)))
	s.apiArgs = []string{
		"--etcd-servers", clientURL,
		"--bind-address", "0.0.0.0",
		"--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(port),
		"--cert-dir", filepath.Join(s.dir, "certs"),
		"--tls-cert-file", filepath.Join(s.dir, "apiserver.crt"),
		"--tls-private-key-file", filepath.Join(s.dir, "apiserver.key"),
		"--client-ca-file", s.CAFile,
		"--token-auth-file", filepath.Join(s.dir, "tokens.csv"),
		"--enable-bootstrap-token-auth",
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(s.dir, "sa.key"),
		"--service-account-signing-key-file", filepath.Join(s.dir, "sa.key"),
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--endpoint-reconciler-type", "none",
		"--audit-policy-file", filepath.Join(s.dir, "audit-policy.yaml"),
		"--audit-log-path", filepath.Join(s.dir, "audit.log"),
		"--profiling=false",
		"--kubelet-client-certificate", filepath.Join(s.dir, "kubelet-client.crt"),
		"--kubelet-client-key", filepath.Join(s.dir, "kubelet-client.key"),
		// As kubeadm sets it: a node's Hostname address need not resolve.
		"--kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname",
		// As kubeadm and upstream's cluster scripts set it (the flag's own
		// default refuses every privileged container, which the upstream
		// e2e specs, e.g. HostPath's, create).
		"--allow-privileged=true",
	}
}

// StartAPIServer (re)starts kube-apiserver on its port and waits until it
// is ready.
func (s *Server) StartAPIServer() {
	s.t.Helper()
	p := s.run(s.bins.Path(clusterbin.KubeAPIServer), s.apiArgs, "kube-apiserver.log")
	s.mu.Lock()
	s.api = p
	s.mu.Unlock()
	cfg := &rest.Config{Host: s.URL, BearerToken: s.admin, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}, QPS: -1}
	tr, err := rest.TransportFor(cfg)
	check(s.t, err, "admin transport")
	s.waitHTTP("kube-apiserver", p, s.URL+"/readyz", &http.Client{Transport: tr, Timeout: 5 * time.Second})
	if s.Admin == nil {
		s.AdminConfig = cfg
		s.Admin, err = kubernetes.NewForConfig(cfg)
		check(s.t, err, "admin client")
	}
}

// StopAPIServer stops kube-apiserver (etcd keeps running).
func (s *Server) StopAPIServer() {
	s.mu.Lock()
	p := s.api
	s.api = nil
	s.mu.Unlock()
	p.stop()
}

func (s *Server) stopEtcd() {
	s.mu.Lock()
	p := s.etcd
	s.etcd = nil
	s.mu.Unlock()
	p.stop()
}

func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	_ = p.log.Close()
}

func (s *Server) run(bin string, args []string, logName string) *proc {
	s.t.Helper()
	f, err := os.OpenFile(filepath.Join(s.dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	check(s.t, err, "log file")
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	check(s.t, cmd.Start(), "starting %s", bin)
	p := &proc{cmd: cmd, done: make(chan struct{}), log: f}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p
}

// waitHTTP polls url until it answers 200, for up to a minute.
func (s *Server) waitHTTP(what string, p *proc, url string, c *http.Client) {
	s.t.Helper()
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			s.t.Fatalf("%s exited while starting:\n%s", what, tail(p.log.Name(), 40))
		default:
		}
		resp, err := c.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("%s not ready at %s after 90s: %s\n%s", what, url, last, tail(p.log.Name(), 40))
}

// bootstrap makes namespace ns ready for pods (creating it if needed): it
// has the default ServiceAccount and the kube-root-ca.crt ConfigMap. With
// the full control plane it waits for the controller-manager to create
// them; without, it creates them itself.
func (s *Server) bootstrap(ns string) {
	s.t.Helper()
	ctx := context.Background()
	_, err := s.Admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.t.Fatalf("namespace %s: %v", ns, err)
	}
	if s.full {
		s.WaitNamespaceReady(ns)
		return
	}
	_, err = s.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.t.Fatalf("service account default in %s: %v", ns, err)
	}
	_, err = s.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(s.ca.pem)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.t.Fatalf("kube-root-ca.crt in %s: %v", ns, err)
	}
}

// KubeletClientUser is the user the API server calls kubelets as.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// grantKubeletAPI lets the API server's kubelet client use every node
// subresource, as kubeadm does, through the bootstrap ClusterRole
// system:kubelet-api-admin.
func (s *Server) grantKubeletAPI() {
	s.t.Helper()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-kubelet-api-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: KubeletClientUser}},
	}
	_, err := s.Admin.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.t.Fatalf("binding %s to system:kubelet-api-admin: %v", KubeletClientUser, err)
	}
}

// AgentArgs are the flags that join a minilet to this server as node
// name: its kubeconfig, and the CA of the client certificates the API
// server presents to the kubelet API.
func (s *Server) AgentArgs(name string) []string {
	s.t.Helper()
	return []string{"--kubeconfig", s.NodeKubeconfig(name), "--client-ca-file", s.CAFile}
}

// NodeKubeconfig writes a kubeconfig for system:node:<name> (group
// system:nodes): with its bearer token if Options.TokenNodes named it,
// else with a client certificate signed by the server's CA.
func (s *Server) NodeKubeconfig(name string) string {
	s.t.Helper()
	if tok, ok := s.tokens[name]; ok {
		return s.writeKubeconfig(name, "    token: "+tok+"\n")
	}
	return s.CertKubeconfig(name, "system:node:"+name, "system:nodes")
}

// CertKubeconfig writes a kubeconfig file called name for user cn in
// groups, authenticated by a client certificate signed by the server's CA,
// and returns its path.
func (s *Server) CertKubeconfig(name, cn string, groups ...string) string {
	s.t.Helper()
	crt, key, err := s.ca.issue(cn, groups, false)
	check(s.t, err, "client certificate for %s", cn)
	crtPath, keyPath := filepath.Join(s.dir, name+".crt"), filepath.Join(s.dir, name+".key")
	check(s.t, os.WriteFile(crtPath, crt, 0o644), "writing client cert")
	check(s.t, os.WriteFile(keyPath, key, 0o600), "writing client key")
	return s.writeKubeconfig(name, "    client-certificate: "+crtPath+"\n    client-key: "+keyPath+"\n")
}

func (s *Server) writeKubeconfig(name, user string) string {
	s.t.Helper()
	kc := "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: " + s.URL +
		"\n    certificate-authority: " + s.CAFile + "\nusers:\n- name: user\n  user:\n" + user +
		"contexts:\n- name: test\n  context:\n    cluster: test\n    user: user\ncurrent-context: test\n"
	path := filepath.Join(s.dir, name+".kubeconfig")
	check(s.t, os.WriteFile(path, []byte(kc), 0o600), "writing kubeconfig")
	return path
}

// AuditCounts counts the API requests user made, by verb and resource
// (e.g. "patch pods/status"), from the audit log.
func (s *Server) AuditCounts(user string) map[string]int {
	s.t.Helper()
	return s.audit(user, 0, false)
}

// AuditCodes counts user's requests answered with a status code of at
// least minCode, by verb, resource and code (e.g. "delete pods 404").
func (s *Server) AuditCodes(user string, minCode int) map[string]int {
	s.t.Helper()
	return s.audit(user, minCode, true)
}

func (s *Server) audit(user string, minCode int, byCode bool) map[string]int {
	s.t.Helper()
	f, err := os.Open(filepath.Join(s.dir, "audit.log"))
	check(s.t, err, "audit log")
	defer func() { _ = f.Close() }()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Stage string `json:"stage"`
			Verb  string `json:"verb"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != user || ev.Stage != "ResponseComplete" || ev.ResponseStatus.Code < minCode {
			continue
		}
		key := ev.Verb + " " + ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			key += "/" + ev.ObjectRef.Subresource
		}
		if byCode {
			key += " " + strconv.Itoa(ev.ResponseStatus.Code)
		}
		out[key]++
	}
	return out
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
