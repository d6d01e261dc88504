package nodecert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// writePair writes a client certificate valid until notAfter and its key
// into dir, and returns their paths.
func writePair(t *testing.T, dir string, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}},
		NotBefore:    notAfter.Add(-2 * time.Hour),
		NotAfter:     notAfter,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func writeConfig(t *testing.T, path, user string) {
	t.Helper()
	kc := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: " +
		"\nusers:\n- name: u\n  user:\n" + user + "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The kubelet bootstraps only when --kubeconfig cannot be used: missing,
// without a client certificate, or with an expired one.
func TestBootstrapOnlyWhenTheKubeconfigCannotBeUsed(t *testing.T) {
	dir := t.TempDir()
	boot := filepath.Join(dir, "bootstrap.conf")
	writeConfig(t, boot, "    token: abcdef.0123456789abcdef\n")
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	cfg := ClientConfig{Kubeconfig: kubeconfig, BootstrapKubeconfig: boot, CertDir: dir, NodeName: "n1"}
	log := slog.New(slog.DiscardHandler)

	pick := func(what string, wantBootstrap bool) {
		t.Helper()
		got, err := credentials(cfg, log)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.bootstrap != wantBootstrap {
			t.Errorf("%s: bootstrap %v, want %v", what, got.bootstrap, wantBootstrap)
		}
	}
	pick("no --kubeconfig file", true)

	writeConfig(t, kubeconfig, "    token: node-token\n")
	pick("--kubeconfig with a token and no certificate", true)

	expired := t.TempDir()
	crt, key := writePair(t, expired, time.Now().Add(-time.Minute))
	writeConfig(t, kubeconfig, "    client-certificate: "+crt+"\n    client-key: "+key+"\n")
	pick("--kubeconfig with an expired certificate", true)

	valid := t.TempDir()
	crt, key = writePair(t, valid, time.Now().Add(time.Hour))
	writeConfig(t, kubeconfig, "    client-certificate: "+crt+"\n    client-key: "+key+"\n")
	pick("--kubeconfig with a valid certificate", false)

	cfg.BootstrapKubeconfig = filepath.Join(dir, "missing.conf")
	if err := os.Remove(kubeconfig); err != nil {
		t.Fatal(err)
	}
	if _, err := credentials(cfg, log); err == nil {
		t.Error("a missing bootstrap kubeconfig was accepted")
	}
}

// The written --kubeconfig names the server and CA of the bootstrap
// kubeconfig and the certificate pair file, readable by root only.
func TestWrittenKubeconfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "kubelet.conf")
	rc := &rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca-bytes"), ServerName: "api"}}
	pair := filepath.Join(dir, "kubelet-client-current.pem")
	if err := os.WriteFile(pair, nil, 0o600); err != nil { // the manager's file, in real life
		t.Fatal(err)
	}
	if err := writeKubeconfig(path, rc, pair); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	got, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Host != rc.Host || string(got.CAData) != "ca-bytes" || got.ServerName != "api" || got.CertFile != pair || got.KeyFile != pair {
		t.Errorf("kubeconfig reads back as host %s CA %q server name %s cert %s key %s", got.Host, got.CAData, got.ServerName, got.CertFile, got.KeyFile)
	}
}
