package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/minilet/minilet/internal/cluster/clustertest"
	"github.com/minilet/minilet/test/harness"
)

// TestTLSBootstrapFromATokenToRotatedCertificates joins a node the way a
// kubeadm cluster does: the agent holds only a bootstrap token, requests
// its client certificate by CSR, which the controller-manager approves and
// signs, writes --kubeconfig, and renews the certificate before it
// expires. The signer issues one-minute certificates here, so rotation
// comes within a minute, and the node keeps heartbeating after the first
// certificate has expired: only the rotated one can do that. With
// serverTLSBootstrap the agent also asks for its serving certificate,
// which an admin approves with kubectl; the kubelet API then presents a
// certificate of the cluster CA.
func TestTLSBootstrapFromATokenToRotatedCertificates(t *testing.T) {
	t.Parallel()
	clustertest.SkipUnlessEnabled(t)
	srv := clustertest.Start(t, clustertest.Options{ControlPlane: true, SigningDuration: time.Minute})
	ctx := context.Background()
	a := harness.New(t)
	a.NodeName = fmt.Sprintf("boot-%d", time.Now().UnixNano()%1e6)
	kubeconfig := filepath.Join(t.TempDir(), "kubelet.conf")
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nrotateCertificates: true\nserverTLSBootstrap: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.ExtraArgs = []string{
		"--config", cfgFile,
		"--bootstrap-kubeconfig", srv.BootstrapKubeconfig("bootstrap-" + a.NodeName),
		"--kubeconfig", kubeconfig,
		"--client-ca-file", srv.CAFile,
	}
	a.Start()
	user := "system:node:" + a.NodeName

	// The first certificate: requested with the token, approved by the
	// controller-manager, written where --kubeconfig says.
	harness.Eventually(t, "the node registered with a bootstrapped certificate", func() (bool, string) {
		_, err := srv.Admin.CoreV1().Nodes().Get(ctx, a.NodeName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatalf("--kubeconfig not written: %v", err)
	}
	pair := filepath.Join(a.RootDir, "pki", "kubelet-client-current.pem")
	for _, ai := range kc.AuthInfos {
		if ai.ClientCertificate != pair || ai.ClientKey != pair {
			t.Errorf("--kubeconfig names %q / %q, want %s", ai.ClientCertificate, ai.ClientKey, pair)
		}
	}
	if st, err := os.Stat(kubeconfig); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, %v; want mode 0600", kubeconfig, st, err)
	}
	var first *x509.Certificate
	harness.Eventually(t, "the client certificate readable", func() (bool, string) {
		// Read through the link the store may be swapping (see below).
		st, err := os.Stat(pair)
		if err != nil {
			return false, err.Error()
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", pair, st.Mode().Perm())
		}
		p, err := tls.LoadX509KeyPair(pair, pair)
		if err != nil {
			return false, err.Error()
		}
		first = p.Leaf
		return true, ""
	})
	if first.Subject.CommonName != user || strings.Join(first.Subject.Organization, ",") != "system:nodes" {
		t.Errorf("client certificate for %v, want CN %s O system:nodes", first.Subject, user)
	}
	csrs := func(signer, requestor string) []certificatesv1.CertificateSigningRequest {
		list, err := srv.Admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []certificatesv1.CertificateSigningRequest
		for _, c := range list.Items {
			if c.Spec.SignerName == signer && (requestor == "" || c.Spec.Username == requestor) {
				out = append(out, c)
			}
		}
		return out
	}
	var bootstrapped bool
	for _, c := range csrs(certificatesv1.KubeAPIServerClientKubeletSignerName, "") {
		if strings.HasPrefix(c.Spec.Username, "system:bootstrap:") && approved(c) && len(c.Status.Certificate) > 0 {
			bootstrapped = true
		}
	}
	if !bootstrapped {
		t.Errorf("no approved, issued CSR from the bootstrap token: %+v", csrs(certificatesv1.KubeAPIServerClientKubeletSignerName, ""))
	}

	// Rotation: a CSR of the node's own, a new certificate on disk, and
	// heartbeats after the first certificate expired.
	harness.EventuallyWithin(t, 3*time.Minute, "the client certificate renewed by the node itself", func() (bool, string) {
		renewals := csrs(certificatesv1.KubeAPIServerClientKubeletSignerName, user)
		// client-go's store swaps the -current.pem link by removing it
		// and linking again: between the two there is no file to read.
		cur, err := tls.LoadX509KeyPair(pair, pair)
		if err != nil {
			return false, err.Error()
		}
		return len(renewals) > 0 && !cur.Leaf.Equal(first), fmt.Sprintf("%d renewal CSRs; current certificate serial %s (first %s)", len(renewals), cur.Leaf.SerialNumber, first.SerialNumber)
	})
	harness.EventuallyWithin(t, 3*time.Minute, "the node's lease renewed after its first certificate expired", func() (bool, string) {
		l, err := srv.Admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, a.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		renewed := l.Spec.RenewTime.Time
		return renewed.After(first.NotAfter.Add(time.Second)), fmt.Sprintf("renewed %s, first certificate expired %s", renewed, first.NotAfter)
	})
	n, err := srv.Admin.CoreV1().Nodes().Get(ctx, a.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(n, v1.NodeReady); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("node not Ready after rotation: %+v", c)
	}

	// The serving certificate: the node's CSR waits for an admin.
	var serving string
	harness.Eventually(t, "the node's serving CSR", func() (bool, string) {
		for _, c := range csrs(certificatesv1.KubeletServingSignerName, user) {
			if !approved(c) {
				serving = c.Name
				return true, ""
			}
		}
		return false, "none pending"
	})
	if out, err := srv.Kubectl("certificate", "approve", serving); err != nil {
		t.Fatalf("kubectl certificate approve: %v\n%s", err, out)
	}
	ip := internalIP(t, n)
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(ca)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(a.Addr, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, "the kubelet API serving a certificate of the cluster CA for the node's IP", func() (bool, string) {
		conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", port), &tls.Config{RootCAs: pool, ServerName: ip})
		if err != nil {
			return false, err.Error()
		}
		_ = conn.Close()
		return true, ""
	})
	// The CLI on the machine follows the new certificate.
	resp, err := a.HTTP.Get(a.Addr + "/healthz")
	if err != nil {
		t.Fatalf("the local client after the serving certificate changed: %v", err)
	}
	_ = resp.Body.Close()
}

func approved(c certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved && cond.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

func condition(n *v1.Node, typ v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func internalIP(t *testing.T, n *v1.Node) string {
	t.Helper()
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP: %+v", n.Name, n.Status.Addresses)
	return ""
}
