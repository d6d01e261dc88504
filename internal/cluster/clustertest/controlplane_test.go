package clustertest_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/cluster/clustertest"
)

// eventually polls cond every 100 ms until it holds, for up to 90 s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestControlPlane proves that the full upstream control plane the harness
// starts works: the controller-manager fills a new namespace and signs a
// CSR, the scheduler binds a pod to a Ready node, and kubectl talks to the
// API server.
func TestControlPlane(t *testing.T) {
	srv := clustertest.Start(t, clustertest.Options{ControlPlane: true})
	ctx := context.Background()
	cs := srv.Admin

	// The controller-manager's serviceaccount and root-ca-cert-publisher
	// controllers fill every new namespace.
	ns := "cp-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.WaitNamespaceReady(ns)
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(cm.Data["ca.crt"]) != strings.TrimSpace(string(ca)) {
		t.Errorf("kube-root-ca.crt holds %q, want the cluster CA", cm.Data["ca.crt"])
	}

	// A Ready node, registered by hand (no agent runs here).
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-node", Labels: map[string]string{"kubernetes.io/hostname": "cp-node"}}}
	node, err = cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("4"),
		v1.ResourceMemory: resource.MustParse("8Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	node.Status = v1.NodeStatus{
		Capacity:    res,
		Allocatable: res,
		Conditions: []v1.NodeCondition{{
			Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// An unbound pod under the namespace's default service account, its
	// token mounted by default: the scheduler binds it to the node.
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unbound", Namespace: ns},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "main", Image: "host", Command: []string{"sleep", "1000"}}},
		},
	}
	pod, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.ServiceAccountName != "default" || !hasTokenVolume(pod) {
		t.Errorf("pod not admitted with the default service account's token: serviceAccountName %q volumes %+v", pod.Spec.ServiceAccountName, pod.Spec.Volumes)
	}
	eventually(t, "the scheduler to bind the pod", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == node.Name, fmt.Sprintf("nodeName %q conditions %+v", p.Spec.NodeName, p.Status.Conditions)
	})

	// kubectl, as a user would.
	out, err := srv.Kubectl("get", "pod", "-n", ns, pod.Name, "-o", "jsonpath={.spec.nodeName}")
	if err != nil || strings.TrimSpace(out) != node.Name {
		t.Errorf("kubectl get pod: %q, %v; want node %s", out, err, node.Name)
	}

	// The controller-manager signs an approved CSR with the cluster CA.
	csr := newCSR(t, "cp-user")
	csr, err = cs.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "Test", Message: "approved by the test",
	})
	if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var signed []byte
	eventually(t, "the controller-manager to sign the CSR", func() (bool, string) {
		c, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		signed = c.Status.Certificate
		return len(signed) > 0, fmt.Sprintf("conditions %+v", c.Status.Conditions)
	})
	block, _ := pem.Decode(signed)
	if block == nil {
		t.Fatalf("signed certificate is not PEM: %q", signed)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caBlock, _ := pem.Decode(ca)
	caCert, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.CheckSignatureFrom(caCert); err != nil || cert.Subject.CommonName != "cp-user" {
		t.Errorf("signed certificate for %q: %v; want cp-user signed by the cluster CA", cert.Subject.CommonName, err)
	}
}

func hasTokenVolume(p *v1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

// newCSR is a CSR for a client certificate of user cn from the
// kube-apiserver-client signer.
func newCSR(t *testing.T, cn string) *certv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		t.Fatal(err)
	}
	var req bytes.Buffer
	if err := pem.Encode(&req, &pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}); err != nil {
		t.Fatal(err)
	}
	return &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-user"},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:           req.Bytes(),
			SignerName:        certv1.KubeAPIServerClientSignerName,
			ExpirationSeconds: ptr.To[int32](600),
			Usages:            []certv1.KeyUsage{certv1.UsageClientAuth},
		},
	}
}
