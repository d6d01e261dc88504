package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/minilet/minilet/internal/apiauth"
	"github.com/minilet/minilet/internal/cm"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/cri/embedded"
	"github.com/minilet/minilet/internal/devicemanager"
	"github.com/minilet/minilet/internal/images"
	"github.com/minilet/minilet/internal/kuberuntime"
	"github.com/minilet/minilet/internal/lifecycle"
	"github.com/minilet/minilet/internal/logs"
	"github.com/minilet/minilet/internal/nodecert"
	"github.com/minilet/minilet/internal/nodestatus"
	"github.com/minilet/minilet/internal/pki"
	"github.com/minilet/minilet/internal/server"
	"github.com/minilet/minilet/internal/store"
)

// listeners are the kubelet API's sockets, bound before the node status
// is built because the node reports the HTTPS port.
type listeners struct {
	secure   net.Listener // --address:--port
	readOnly net.Listener // --address:--read-only-port; nil when 0
}

// listenAPI binds the HTTPS port and, unless it is 0, the read-only port.
func listenAPI(cfg *config.Config) (listeners, error) {
	var l listeners
	listen := func(flag string, port int) (net.Listener, error) {
		addr := net.JoinHostPort(ipString(cfg.Address), strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("--%s: listening on %s: %w", flag, addr, err)
		}
		return ln, nil
	}
	var err error
	if l.secure, err = listen(config.FlagPort, cfg.Port); err != nil {
		return l, err
	}
	if cfg.ReadOnlyPort != 0 {
		if l.readOnly, err = listen(config.FlagReadOnlyPort, cfg.ReadOnlyPort); err != nil {
			_ = l.secure.Close()
			return l, err
		}
	}
	return l, nil
}

// close releases both sockets (on an early return before serving).
func (l listeners) close() {
	for _, ln := range []net.Listener{l.secure, l.readOnly} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// serveAPI serves the kubelet API over TLS on the secure port, behind
// authentication and authorization, and the read-only subset on the
// read-only port. It records the HTTPS URL in <root-dir>/minilet.addr and
// the serving certificate under <root-dir>/pki for the CLI. A server that
// fails reports on errc.
func serveAPI(ctx context.Context, bg *background, l listeners, v apiViews, link *clusterLink, reg *prometheus.Registry, errc chan<- error, log *slog.Logger) error {
	cfg := v.cfg
	serving, err := clusterServing(cfg, v.node.Node, link, log)
	if err != nil {
		return err
	}
	if serving != nil {
		bg.run(serving.Run)
	}
	tlsConfig, err := servingTLS(cfg, v.node.Node, serving, log)
	if err != nil {
		return err
	}
	localCA, err := pki.EnsureLocalAdmin(pki.Dir(cfg.RootDir))
	if err != nil {
		return fmt.Errorf("the local client certificate under --root-dir: %w", err)
	}
	var clients apiauth.Clients
	if link != nil {
		c := link.cluster.Client()
		clients = apiauth.Clients{Tokens: c.AuthenticationV1(), Access: c.AuthorizationV1()}
	}
	auth, err := apiauth.New(apiauth.Config{
		NodeName:        cfg.NodeName,
		ClientCAFile:    cfg.ClientCAFile,
		Anonymous:       cfg.AnonymousAuth,
		Webhook:         cfg.WebhookAuthn,
		WebhookCacheTTL: cfg.WebhookAuthnCacheTTL,
		Mode:            cfg.AuthorizationMode,
		AuthorizedTTL:   cfg.AuthorizedTTL,
		UnauthorizedTTL: cfg.UnauthorizedTTL,
		LocalCA:         localCA,
		Logger:          log,
	}, clients)
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	bg.run(auth.Run)

	locator := logs.Locator{Pods: v.pods.List, Root: filepath.Join(cfg.RootDir, "logs")}
	scfg := server.Config{
		Pods: v, Node: v, Events: v, Logs: locator, Running: locator, Stats: v, Devices: v, Images: v,
		Streams:    streams{v.streams},
		Gatherer:   reg,
		Configz:    configz(cfg),
		NodeLogDir: nodeLogDir(cfg),
		Profiling:  cfg.Raw.EnableProfilingHandler != nil && *cfg.Raw.EnableProfilingHandler,
		Auth:       auth,
		Healthy:    v.healthy,
		Logger:     log,
	}
	secure := tls.NewListener(l.secure, tlsConfig)
	if err := server.WriteAddrFile(cfg.RootDir, l.secure.Addr().String()); err != nil {
		return fmt.Errorf("recording the API address under --root-dir: %w", err)
	}
	log.Info("serving the kubelet API", "address", "https://"+l.secure.Addr().String(),
		"authentication", authnSummary(cfg), "authorization", cfg.AuthorizationMode)
	serve := func(name string, srv *server.Server, ln net.Listener) {
		bg.run(func(ctx context.Context) {
			if err := srv.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	serve("kubelet API", server.New(scfg), secure)
	if l.readOnly != nil {
		log.Info("serving the read-only API", "address", "http://"+l.readOnly.Addr().String())
		serve("read-only API", server.NewReadOnly(scfg), l.readOnly)
	}
	return nil
}

// configz is the configuration the agent runs with, as /configz shows it.
func configz(cfg *config.Config) any {
	raw := cfg.Raw
	raw.APIVersion, raw.Kind = config.APIVersion, config.Kind
	return raw
}

// nodeLogDir is what /logs/ serves: the node's /var/log, as the kubelet's.
func nodeLogDir(cfg *config.Config) string {
	if !cfg.SystemLogHandler {
		return ""
	}
	return "/var/log"
}

// clusterServing is the serving certificate the cluster signs
// (serverTLSBootstrap); nil when not asked for, or standalone.
func clusterServing(cfg *config.Config, node func() *v1.Node, link *clusterLink, log *slog.Logger) (*nodecert.Serving, error) {
	if !cfg.ServerTLSBootstrap {
		return nil, nil
	}
	if link == nil {
		log.Warn("serverTLSBootstrap needs a cluster (--kubeconfig); serving a self-signed certificate")
		return nil, nil
	}
	var hosts []string
	var ips []net.IP
	if n := node(); n != nil {
		for _, a := range n.Status.Addresses {
			switch a.Type {
			case v1.NodeHostName, v1.NodeInternalDNS, v1.NodeExternalDNS:
				hosts = append(hosts, a.Address)
			case v1.NodeInternalIP, v1.NodeExternalIP:
				if ip := net.ParseIP(a.Address); ip != nil {
					ips = append(ips, ip)
				}
			}
		}
	}
	s, err := nodecert.NewServing(nodecert.ServingConfig{
		CertDir: cfg.CertDir, NodeName: cfg.NodeName, Hostnames: hosts, IPs: ips,
		REST: link.creds.REST, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("serverTLSBootstrap: %w", err)
	}
	return s, nil
}

// servingTLS is the HTTPS API's TLS configuration: the certificate the
// cluster signed when serving is given and has one, else --tls-cert-file,
// else a self-signed certificate in --cert-dir for the node's name and
// addresses. (The kubelet refuses TLS until the cluster signs; minilet
// serves its self-signed certificate meanwhile, which a client checking
// the cluster CA refuses just the same, so that the local CLI works.)
// The certificate served is recorded for the CLI to pin. Client
// certificates are asked for, not required: the authenticator checks them
// (or a bearer token) per request.
func servingTLS(cfg *config.Config, node func() *v1.Node, serving *nodecert.Serving, log *slog.Logger) (*tls.Config, error) {
	certFile, keyFile := cfg.TLSCertFile, cfg.TLSPrivateKeyFile
	pinDir := pki.Dir(cfg.RootDir)
	if certFile == "" {
		var ips []net.IP
		if n := node(); n != nil {
			for _, a := range n.Status.Addresses {
				if ip := net.ParseIP(a.Address); ip != nil {
					ips = append(ips, ip)
				}
			}
		}
		ips = append(ips, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
		var err error
		certFile, keyFile, err = pki.EnsureServing(cfg.CertDir, cfg.NodeName, ips, []string{"localhost"})
		if err != nil {
			return nil, fmt.Errorf("serving certificate in --cert-dir: %w", err)
		}
		log.Debug("serving a self-signed certificate", "cert", certFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s / --tls-private-key-file %s: %w", certFile, keyFile, err)
	}
	pin := &servedPin{dir: pinDir, log: log}
	if err := pin.record(&pair); err != nil {
		return nil, err
	}
	tc := &tls.Config{
		MinVersion:   cfg.TLSMinVersion,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequestClientCert,
		// Upgraded streams (exec, attach, port-forward) need HTTP/1.1.
		NextProtos: []string{"http/1.1"},
	}
	if serving != nil {
		tc.Certificates = nil
		tc.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cur := serving.Current()
			if cur == nil {
				cur = &pair
			}
			if err := pin.record(cur); err != nil {
				return nil, err
			}
			return cur, nil
		}
	}
	return tc, nil
}

// servedPin records the certificate the API serves for the CLI, rewriting
// the record only when it changes (a cluster-signed certificate replaces
// the self-signed one, or is renewed).
type servedPin struct {
	dir  string
	log  *slog.Logger
	mu   sync.Mutex
	last []byte
}

func (p *servedPin) record(c *tls.Certificate) error {
	if len(c.Certificate) == 0 {
		return errors.New("serving certificate: empty chain")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if bytes.Equal(p.last, c.Certificate[0]) {
		return nil
	}
	var buf bytes.Buffer
	for _, der := range c.Certificate {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	if err := pki.WritePin(p.dir, buf.Bytes()); err != nil {
		return err
	}
	p.last = c.Certificate[0]
	return nil
}

// authnSummary names the accepted credentials, for the start-up log.
func authnSummary(cfg *config.Config) string {
	parts := []string{"local client certificate"}
	if cfg.ClientCAFile != "" {
		parts = append(parts, "client certificates of "+cfg.ClientCAFile)
	}
	if cfg.WebhookAuthn {
		parts = append(parts, "TokenReview")
	}
	if cfg.AnonymousAuth {
		parts = append(parts, "anonymous")
	}
	return strings.Join(parts, ", ")
}

// archiveLoader is a runtime that can import image archives (the embedded
// runtime's local store).
type archiveLoader interface {
	LoadArchive(ctx context.Context, r io.Reader) ([]embedded.LoadedImage, error)
}

// serveAdmin serves mutating calls (image load) on <root-dir>/minilet.sock,
// mode 0600, never on the read-only port. A remote runtime pulls its own
// images: no admin socket then.
func serveAdmin(ctx context.Context, bg *background, cfg *config.Config, cri criRuntime, errc chan<- error, log *slog.Logger) error {
	loader, ok := cri.(archiveLoader)
	if !ok {
		return nil
	}
	ln, err := server.ListenAdmin(cfg.RootDir)
	if err != nil {
		return fmt.Errorf("admin socket under --root-dir %s: %w", cfg.RootDir, err)
	}
	adm := server.NewAdmin(server.AdminConfig{Logger: log, Loader: server.ImageLoaderFunc(
		func(ctx context.Context, r io.Reader) ([]server.LoadedImage, error) {
			imgs, err := loader.LoadArchive(ctx, r)
			out := make([]server.LoadedImage, 0, len(imgs))
			for _, i := range imgs {
				out = append(out, server.LoadedImage{ID: i.ID, RepoTags: i.RepoTags})
			}
			return out, err
		})})
	bg.run(func(ctx context.Context) {
		if err := adm.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
			errc <- fmt.Errorf("admin socket: %w", err)
		}
	})
	return nil
}

// apiViews shows the subsystems to the read-only API in the shapes its
// endpoints serve.
type apiViews struct {
	cfg     *config.Config
	pods    *lifecycle.Pods
	node    *nodestatus.Builder
	events  *store.Events
	cgroups *cm.Manager
	devices *devicemanager.Manager
	images  *images.GC
	runtime criRuntime
	streams *kuberuntime.Streams
	healthy func() error // the sync loop's health, for /healthz
}

var (
	_ server.PodLister       = apiViews{}
	_ server.NodeGetter      = apiViews{}
	_ server.EventLister     = apiViews{}
	_ server.SummaryProvider = apiViews{}
	_ server.DeviceLister    = apiViews{}
	_ server.ImageLister     = apiViews{}
)

// Pods lists every pod with its status.
func (v apiViews) Pods() []v1.Pod { return v.pods.List() }

// Node returns the node as it is now.
func (v apiViews) Node() *v1.Node { return v.node.Node() }

// Events lists recorded events, of one pod when name is given.
func (v apiViews) Events(namespace, name string) ([]v1.Event, error) {
	return v.events.List(namespace, name)
}

// Summary serves the kubelet's Summary API from the cgroups.
func (v apiViews) Summary(ctx context.Context) (*statsapi.Summary, error) {
	list := v.pods.List()
	pods := make([]*v1.Pod, 0, len(list))
	for i := range list {
		pods = append(pods, &list[i])
	}
	return v.cgroups.Summary(ctx, pods)
}

// Devices lists the devices the plugins advertise and who holds them.
func (v apiViews) Devices() []server.Device {
	var out []server.Device
	for _, d := range v.devices.Devices() {
		dev := server.Device{Resource: d.Resource, ID: d.ID, Health: "Healthy", Container: d.Container}
		if !d.Healthy {
			dev.Health = "Unhealthy"
		}
		if d.PodUID != "" {
			if p, ok := v.pods.Pod(d.PodUID); ok {
				dev.Pod = p.Namespace + "/" + p.Name
			}
		}
		out = append(out, dev)
	}
	return out
}

// Images lists the runtime's images now, with what image GC knows of
// them (first detected, last used).
func (v apiViews) Images(ctx context.Context) ([]server.Image, error) {
	list, err := v.runtime.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	known := map[string]images.ImageRecord{}
	for _, r := range v.images.Images() {
		known[r.ID] = r
	}
	out := make([]server.Image, 0, len(list))
	for _, img := range list {
		r := known[img.Id]
		out = append(out, server.Image{
			ID: img.Id, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Size: img.Size,
			Pinned: img.Pinned, FirstDetected: r.FirstDetected, LastUsed: r.LastUsed,
		})
	}
	return out, nil
}

// streams shows the runtime's streaming sessions to the API.
type streams struct{ s *kuberuntime.Streams }

func (a streams) ExecURL(ctx context.Context, pod *v1.Pod, ctr string, cmd []string, o server.StreamOptions) (*url.URL, error) {
	return a.s.ExecURL(ctx, pod, ctr, cmd, kuberuntime.StreamOptions(o))
}

func (a streams) AttachURL(ctx context.Context, pod *v1.Pod, ctr string, o server.StreamOptions) (*url.URL, error) {
	return a.s.AttachURL(ctx, pod, ctr, kuberuntime.StreamOptions(o))
}

func (a streams) Run(ctx context.Context, pod *v1.Pod, ctr string, cmd []string) ([]byte, error) {
	return a.s.Run(ctx, pod, ctr, cmd)
}

func (a streams) PortForwardURL(ctx context.Context, pod *v1.Pod, ports []int32) (*url.URL, error) {
	return a.s.PortForwardURL(ctx, pod, ports)
}

func ipString(ip net.IP) string {
	if ip == nil {
		return ""
	}
	return ip.String()
}

func portOf(addr net.Addr) int {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.Port
	}
	_, p, _ := net.SplitHostPort(addr.String())
	n, _ := strconv.Atoi(p)
	return n
}
