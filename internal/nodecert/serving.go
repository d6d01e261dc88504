package nodecert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
)

// ServingConfig configures the kubelet API's serving certificate from the
// cluster (serverTLSBootstrap).
type ServingConfig struct {
	// CertDir (--cert-dir) holds kubelet-server-current.pem. Required.
	CertDir string
	// NodeName is the node the certificate is for. Required.
	NodeName string
	// Hostnames and IPs are the certificate's subject alternative names:
	// the node's Hostname and InternalIP/ExternalIP addresses.
	Hostnames []string
	IPs       []net.IP
	// REST is the node's API settings (the CSR is the node's own).
	REST *rest.Config
	// Logger receives progress; default slog.Default().
	Logger *slog.Logger
}

// Serving keeps the kubelet API's serving certificate signed by the
// cluster. Unlike the client certificate, nothing waits for it: the
// kubelet API serves as soon as it is issued (see Current).
type Serving struct {
	manager certificate.Manager
	log     *slog.Logger
}

// NewServing prepares the serving certificate manager; Run requests the
// certificate (when the store has none valid) and renews it.
func NewServing(cfg ServingConfig) (*Serving, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CertDir == "" || cfg.NodeName == "" || cfg.REST == nil {
		return nil, fmt.Errorf("serving certificate: cert dir, node name and API settings are required")
	}
	if len(cfg.Hostnames) == 0 && len(cfg.IPs) == 0 {
		return nil, fmt.Errorf("serving certificate for node %s: the node has no address to name in it", cfg.NodeName)
	}
	if err := os.MkdirAll(cfg.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("--cert-dir %s: %w", cfg.CertDir, err)
	}
	store, err := certificate.NewFileStore(ServingPrefix, cfg.CertDir, cfg.CertDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("serving certificate store in %s: %w", cfg.CertDir, err)
	}
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) {
			return kubernetes.NewForConfig(cfg.REST)
		},
		Template: &x509.CertificateRequest{
			Subject: pkix.Name{
				CommonName:   "system:node:" + cfg.NodeName,
				Organization: []string{"system:nodes"},
			},
			DNSNames:    cfg.Hostnames,
			IPAddresses: cfg.IPs,
		},
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
		Name:             ServingPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate manager: %w", err)
	}
	return &Serving{manager: m, log: cfg.Logger.With("component", "nodecert")}, nil
}

// Current is the issued serving certificate, nil until one is.
func (s *Serving) Current() *tls.Certificate { return s.manager.Current() }

// Run requests and renews the serving certificate until ctx ends.
func (s *Serving) Run(ctx context.Context) {
	s.manager.Start()
	defer s.manager.Stop()
	if s.manager.Current() == nil {
		s.log.Info("requested a serving certificate from the cluster (signer "+certificatesv1.KubeletServingSignerName+"); it needs an approver",
			"hint", "kubectl get csr; kubectl certificate approve <name>")
		if err := waitCurrent(ctx, s.manager, "serving", 5*time.Minute, s.log); err != nil {
			return
		}
		s.log.Info("serving the cluster-signed certificate", "expires", expiry(s.manager.Current()))
	}
	<-ctx.Done()
}
