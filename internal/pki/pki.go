// Package pki keeps the agent's certificates under <root-dir>/pki, as the
// kubelet keeps its own under --cert-dir:
//
//   - kubelet.crt / kubelet.key: the self-signed serving certificate of
//     the kubelet API, made at first start when --tls-cert-file is not
//     given, and reused afterwards;
//   - local-ca.crt / local-ca.key and local-admin.crt / local-admin.key: a
//     certificate authority known only to this agent and the one client
//     certificate it signs, for the CLI on this machine. Keys are readable
//     by root only, so an unprivileged local user cannot call the API;
//   - serving.crt: a copy of the certificate the API serves, which the CLI
//     pins instead of trusting a CA.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/minilet/minilet/internal/atomicfile"
)

// File names under the pki directory.
const (
	ServingCertFile = "kubelet.crt"
	ServingKeyFile  = "kubelet.key"
	LocalCAFile     = "local-ca.crt"
	localCAKeyFile  = "local-ca.key"
	ClientCertFile  = "local-admin.crt"
	ClientKeyFile   = "local-admin.key"
	PinFile         = "serving.crt"
)

// LocalAdmin is the user name of the local client certificate.
const LocalAdmin = "minilet:local-admin"

// Dir is the pki directory under the agent's root dir.
func Dir(rootDir string) string { return filepath.Join(rootDir, "pki") }

// EnsureServing returns the self-signed serving certificate and key files
// in dir, creating them (for host, ips and dns names, valid one year, as
// the kubelet's) when they are missing, unreadable or expired.
func EnsureServing(dir, host string, ips []net.IP, dns []string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, ServingCertFile), filepath.Join(dir, ServingKeyFile)
	if pair, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil && pair.Leaf != nil && time.Now().Before(pair.Leaf.NotAfter) {
		return certFile, keyFile, nil
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, ips, dns)
	if err != nil {
		return "", "", fmt.Errorf("self-signed serving certificate for %s: %w", host, err)
	}
	if err := writePair(dir, ServingCertFile, certPEM, ServingKeyFile, keyPEM); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// EnsureLocalAdmin makes sure dir holds the local CA and the local admin's
// client certificate signed by it, and returns the CA certificate in PEM.
// An existing pair is kept while it is valid for another day.
func EnsureLocalAdmin(dir string) ([]byte, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, LocalCAFile))
	if err == nil {
		if pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ClientCertFile), filepath.Join(dir, ClientKeyFile)); err == nil &&
			pair.Leaf != nil && time.Now().Add(24*time.Hour).Before(pair.Leaf.NotAfter) && signedBy(pair.Leaf, caPEM) {
			return caPEM, nil
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("local CA key: %w", err)
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "minilet-local-ca"}, caKey)
	if err != nil {
		return nil, fmt.Errorf("local CA certificate: %w", err)
	}
	clientPEM, clientKeyPEM, err := signClient(ca, caKey, LocalAdmin)
	if err != nil {
		return nil, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: ca.Raw})
	caKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(caKey)
	if err != nil {
		return nil, fmt.Errorf("local CA key: %w", err)
	}
	if err := writePair(dir, LocalCAFile, caPEM, localCAKeyFile, caKeyPEM); err != nil {
		return nil, err
	}
	if err := writePair(dir, ClientCertFile, clientPEM, ClientKeyFile, clientKeyPEM); err != nil {
		return nil, err
	}
	return caPEM, nil
}

// WritePin records the certificate the API serves (PEM, leaf first), for
// the CLI to pin.
func WritePin(dir string, certPEM []byte) error {
	if err := privateDir(dir); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, PinFile), certPEM, 0o644, atomicfile.Durable); err != nil {
		return fmt.Errorf("recording the serving certificate: %w", err)
	}
	return nil
}

// ClientTLS is the CLI's TLS configuration for the agent whose pki
// directory is dir: the local admin's certificate, and a server that must
// present exactly the pinned serving certificate, read at each handshake
// (the agent rewrites it when a cluster-signed certificate replaces its
// own). Reading the key needs root: an unprivileged user gets a
// permission error.
func ClientTLS(dir string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ClientCertFile), filepath.Join(dir, ClientKeyFile))
	if err != nil {
		return nil, fmt.Errorf("the local client certificate in %s: %w", dir, err)
	}
	if _, err := readPin(dir); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		// The chain is checked by pinning the leaf below, not by a CA:
		// the serving certificate is usually self-signed.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			pinned, err := readPin(dir)
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 || string(cs.PeerCertificates[0].Raw) != string(pinned) {
				return errors.New("the server's certificate is not the one the agent recorded in " + filepath.Join(dir, PinFile))
			}
			return nil
		},
	}, nil
}

// readPin returns the pinned serving certificate (DER) in dir.
func readPin(dir string) ([]byte, error) {
	pinPEM, err := os.ReadFile(filepath.Join(dir, PinFile))
	if err != nil {
		return nil, fmt.Errorf("the agent's serving certificate: %w", err)
	}
	block, _ := pem.Decode(pinPEM)
	if block == nil {
		return nil, fmt.Errorf("the agent's serving certificate %s: no PEM certificate", filepath.Join(dir, PinFile))
	}
	return block.Bytes, nil
}

// signClient issues a one-year client certificate for user cn.
func signClient(ca *x509.Certificate, caKey crypto.Signer, cn string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("client key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, nil, fmt.Errorf("client certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("client certificate for %s: %w", cn, err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("client key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der}), keyPEM, nil
}

func signedBy(leaf *x509.Certificate, caPEM []byte) bool {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return false
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// privateDir makes dir, the agent's key directory, readable by root only
// (0700), also when an earlier version made it 0755: the keys in it are
// 0600, and no one else has a reason to list it.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("pki directory: %w", err)
	}
	return nil
}

// writePair writes a certificate (0644) and its key (0600) into dir.
func writePair(dir, certName string, certPEM []byte, keyName string, keyPEM []byte) error {
	if err := privateDir(dir); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, keyName), keyPEM, 0o600, atomicfile.Durable); err != nil {
		return fmt.Errorf("writing %s: %w", keyName, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, certName), certPEM, 0o644, atomicfile.Durable); err != nil {
		return fmt.Errorf("writing %s: %w", certName, err)
	}
	return nil
}
