// Package nodecert gets the node's certificates from the API server and
// keeps them current, as the kubelet's TLS bootstrapping does:
//
//   - the client certificate (user system:node:<name>, group
//     system:nodes; signer kubernetes.io/kube-apiserver-client-kubelet):
//     requested with the --bootstrap-kubeconfig credentials when
//     --kubeconfig is missing or its certificate expired, stored under
//     --cert-dir as kubelet-client-current.pem, with --kubeconfig written
//     to point at it; renewed with the node's own credentials before it
//     expires when rotateCertificates is on;
//   - the serving certificate of the kubelet API (signer
//     kubernetes.io/kubelet-serving) when serverTLSBootstrap is on, stored
//     as kubelet-server-current.pem and renewed the same way. The API
//     server's controller-manager does not approve these: an admin (or an
//     approver the cluster runs) must.
//
// Requesting, waiting for approval, storing and rotating are client-go's
// certificate manager (k8s.io/client-go/util/certificate); this package
// decides when to use it and wires its certificates into the API clients
// and the kubelet API's TLS.
package nodecert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
)

// File name prefixes under the cert dir, as the kubelet names them: the
// current pair of each is <prefix>-current.pem (certificate and key in
// one file, a symlink to the newest <prefix>-<timestamp>.pem).
const (
	ClientPrefix  = "kubelet-client"
	ServingPrefix = "kubelet-server"
)

// ClientConfig says where the node's API credentials come from.
type ClientConfig struct {
	// Kubeconfig (--kubeconfig) holds the node's credentials. With
	// BootstrapKubeconfig it is (re)written after a bootstrap. Required.
	Kubeconfig string
	// BootstrapKubeconfig (--bootstrap-kubeconfig) holds credentials
	// allowed to request a client certificate (a bootstrap token);
	// "" = no bootstrap: Kubeconfig must work as it is.
	BootstrapKubeconfig string
	// CertDir (--cert-dir) holds the certificates. Required when
	// bootstrapping or rotating.
	CertDir string
	// NodeName is the node the certificate is for. Required.
	NodeName string
	// Rotate (rotateCertificates) renews the client certificate before it
	// expires, for as long as Run runs.
	Rotate bool
	// Logger receives progress; default slog.Default().
	Logger *slog.Logger
}

// Client is the node's connection settings to the API server: REST
// builds clients whose credentials follow rotation.
type Client struct {
	REST *rest.Config

	log     *slog.Logger
	manager certificate.Manager // nil when nothing rotates
	conns   *connrotation.Dialer
}

// bootstrapPoll is how often NewClient reports that it still waits for
// a certificate.
const bootstrapPoll = 15 * time.Second

// NewClient returns the node's API settings. With a bootstrap kubeconfig
// and no usable --kubeconfig, it first requests a client certificate and
// waits until the certificate is issued (or ctx ends): a node without
// credentials can do nothing in the cluster. It does not start rotation;
// Run does.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "nodecert")
	if cfg.BootstrapKubeconfig == "" && !cfg.Rotate {
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		return &Client{REST: rc, log: log}, nil
	}
	if cfg.CertDir == "" {
		return nil, errors.New("--cert-dir is required to bootstrap or rotate the client certificate")
	}
	if err := os.MkdirAll(cfg.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("--cert-dir %s: %w", cfg.CertDir, err)
	}

	// initial: the credentials that request the first certificate.
	initial, err := credentials(cfg, log)
	if err != nil {
		return nil, err
	}
	if !initial.bootstrap && !cfg.Rotate {
		return &Client{REST: initial.rest, log: log}, nil // --kubeconfig works as it is
	}
	certFile, keyFile := initial.CertFile, initial.KeyFile
	if initial.bootstrap {
		certFile, keyFile = "", ""
	}
	store, err := certificate.NewFileStore(ClientPrefix, cfg.CertDir, cfg.CertDir, certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate store in %s: %w", cfg.CertDir, err)
	}
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(current *tls.Certificate) (kubernetes.Interface, error) {
			rc := initial.rest
			if current != nil {
				// Renewal: the node's own, current certificate.
				var err error
				if rc, err = withCert(rc, current); err != nil {
					return nil, err
				}
			}
			return kubernetes.NewForConfig(rc)
		},
		Template: &x509.CertificateRequest{Subject: pkix.Name{
			CommonName:   "system:node:" + cfg.NodeName,
			Organization: []string{"system:nodes"},
		}},
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:        certificate.DefaultKubeletClientGetUsages,
		CertificateStore: store,
		Name:             ClientPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("client certificate manager: %w", err)
	}
	c := &Client{log: log, manager: m}
	if err := c.waitFirst(ctx, "client"); err != nil {
		m.Stop()
		return nil, err
	}
	if initial.bootstrap {
		if err := writeKubeconfig(cfg.Kubeconfig, initial.rest, filepath.Join(cfg.CertDir, ClientPrefix+"-current.pem")); err != nil {
			m.Stop()
			return nil, err
		}
		log.Info("bootstrapped the client certificate", "kubeconfig", cfg.Kubeconfig, "expires", expiry(m.Current()))
	}
	if !cfg.Rotate {
		// The certificate is on disk and named by --kubeconfig: read it
		// as any kubeconfig (client-go reloads the files it names).
		m.Stop()
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		return &Client{REST: rc, log: log}, nil
	}
	if c.REST, c.conns, err = rotatingREST(initial.rest, m); err != nil {
		m.Stop()
		return nil, err
	}
	return c, nil
}

// Run renews the client certificate until ctx ends, and drops the open
// connections to the API server when it changes so that the next ones
// present the new one. Without rotation it returns at once.
func (c *Client) Run(ctx context.Context) {
	if c.manager == nil {
		return
	}
	defer c.manager.Stop()
	last := c.manager.Current()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if cur := c.manager.Current(); cur != last && cur != nil {
			c.log.Info("client certificate rotated; reconnecting to the API server with it", "expires", expiry(cur))
			last = cur
			c.conns.CloseAll()
		}
	}
}

// waitFirst starts the manager (which requests a certificate at once when
// the store has none, or an expired one) and waits until it has one.
func (c *Client) waitFirst(ctx context.Context, what string) error {
	c.manager.Start()
	return waitCurrent(ctx, c.manager, what, bootstrapPoll, c.log)
}

// waitCurrent waits until m holds a certificate, saying so every period.
func waitCurrent(ctx context.Context, m certificate.Manager, what string, every time.Duration, log *slog.Logger) error {
	if m.Current() != nil {
		return nil
	}
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	next := start.Add(every)
	for m.Current() == nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the %s certificate signing request to be approved and signed: %w", what, ctx.Err())
		case now := <-tick.C:
			if now.After(next) {
				log.Warn("still waiting for the certificate signing request to be approved and signed", "certificate", what, "waited", now.Sub(start).Round(time.Second))
				next = now.Add(every)
			}
		}
	}
	return nil
}

// initialCredentials is the kubeconfig that requests the first
// certificate.
type initialCredentials struct {
	rest              *rest.Config
	bootstrap         bool   // rest is the bootstrap kubeconfig's
	CertFile, KeyFile string // the client certificate --kubeconfig names
}

// credentials picks --kubeconfig when it holds a client certificate that
// has not expired (or, without a bootstrap kubeconfig, whatever it holds),
// else the bootstrap kubeconfig.
func credentials(cfg ClientConfig, log *slog.Logger) (initialCredentials, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if cfg.BootstrapKubeconfig == "" {
		if err != nil {
			return initialCredentials{}, fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		return initialCredentials{rest: rc, CertFile: rc.CertFile, KeyFile: rc.KeyFile}, nil
	}
	why := fmt.Sprint(err)
	if err == nil {
		if why = unusable(rc); why == "" {
			return initialCredentials{rest: rc, CertFile: rc.CertFile, KeyFile: rc.KeyFile}, nil
		}
	}
	log.Info("bootstrapping a client certificate", "kubeconfig", cfg.Kubeconfig, "reason", why)
	brc, err := clientcmd.BuildConfigFromFlags("", cfg.BootstrapKubeconfig)
	if err != nil {
		return initialCredentials{}, fmt.Errorf("--bootstrap-kubeconfig %s: %w", cfg.BootstrapKubeconfig, err)
	}
	return initialCredentials{rest: brc, bootstrap: true}, nil
}

// unusable says why rc's client certificate cannot be used ("" when it
// can): there is none, it cannot be read, or it expired.
func unusable(rc *rest.Config) string {
	certPEM, keyPEM := rc.CertData, rc.KeyData
	var err error
	if len(certPEM) == 0 && rc.CertFile != "" {
		if certPEM, err = os.ReadFile(rc.CertFile); err != nil {
			return err.Error()
		}
	}
	if len(keyPEM) == 0 && rc.KeyFile != "" {
		if keyPEM, err = os.ReadFile(rc.KeyFile); err != nil {
			return err.Error()
		}
	}
	if len(certPEM) == 0 {
		return "it holds no client certificate"
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return "its client certificate: " + err.Error()
	}
	if now := time.Now(); now.After(pair.Leaf.NotAfter) {
		return fmt.Sprintf("its client certificate expired at %s", pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// withCert is rc's server and CA, authenticated by cert.
func withCert(rc *rest.Config, cert *tls.Certificate) (*rest.Config, error) {
	out, _, err := certREST(rc, func() *tls.Certificate { return cert })
	return out, err
}

// rotatingREST is rc's server and CA, presenting whatever certificate m
// holds at each TLS handshake, over a dialer whose connections can be
// closed all at once when it changes.
func rotatingREST(rc *rest.Config, m certificate.Manager) (*rest.Config, *connrotation.Dialer, error) {
	return certREST(rc, m.Current)
}

func certREST(rc *rest.Config, current func() *tls.Certificate) (*rest.Config, *connrotation.Dialer, error) {
	out := rest.AnonymousClientConfig(rc)
	base, err := rest.TLSConfigFor(out)
	if err != nil {
		return nil, nil, fmt.Errorf("TLS settings of the API server %s: %w", rc.Host, err)
	}
	if base == nil {
		return nil, nil, fmt.Errorf("the API server %s is not served over HTTPS: a client certificate cannot be used", rc.Host)
	}
	base.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cur := current(); cur != nil {
			return cur, nil
		}
		// No certificate yet: connect without one (and be refused by name).
		return &tls.Certificate{}, nil
	}
	d := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     base,
		MaxIdleConnsPerHost: 25,
		DialContext:         d.DialContext,
	})
	return out, d, nil
}

// writeKubeconfig writes path naming rc's server and CA, and the client
// certificate and key in pairFile.
func writeKubeconfig(path string, rc *rest.Config, pairFile string) error {
	caData := rc.CAData
	if len(caData) == 0 && rc.CAFile != "" {
		var err error
		if caData, err = os.ReadFile(rc.CAFile); err != nil {
			return fmt.Errorf("the bootstrap kubeconfig's CA %s: %w", rc.CAFile, err)
		}
	}
	kc := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"default-cluster": {
			Server: rc.Host, CertificateAuthorityData: caData,
			InsecureSkipTLSVerify: rc.Insecure, TLSServerName: rc.ServerName,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default-auth": {
			ClientCertificate: pairFile, ClientKey: pairFile,
		}},
		Contexts: map[string]*clientcmdapi.Context{"default-context": {
			Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default",
		}},
		CurrentContext: "default-context",
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	if err := clientcmd.WriteToFile(kc, path); err != nil {
		return fmt.Errorf("writing --kubeconfig %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	return nil
}

func expiry(c *tls.Certificate) string {
	if c == nil || c.Leaf == nil {
		return ""
	}
	return c.Leaf.NotAfter.UTC().Format(time.RFC3339)
}
