package clustertest

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BootstrapKubeconfig sets the cluster up for kubelet TLS bootstrapping as
// kubeadm does and returns a kubeconfig holding a new bootstrap token
// (user system:bootstrap:<id>, group system:bootstrappers), good for an
// hour:
//
//   - the token as a bootstrap-token Secret in kube-system, which the API
//     server (--enable-bootstrap-token-auth) authenticates;
//   - group system:bootstrappers may create CSRs (system:node-bootstrapper)
//     and has them for kubernetes.io/kube-apiserver-client-kubelet approved
//     by the controller-manager (…:certificatesigningrequests:nodeclient);
//   - group system:nodes has its renewals approved the same way
//     (…:certificatesigningrequests:selfnodeclient).
//
// Issuing needs Options.ControlPlane (the controller-manager's approver
// and signer).
func (s *Server) BootstrapKubeconfig(name string) string {
	s.t.Helper()
	ctx := context.Background()
	id, secret := randLower(6), randLower(16)
	_, err := s.Admin.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       v1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
		},
	}, metav1.CreateOptions{})
	check(s.t, err, "bootstrap token secret")
	for binding, role := range map[string]struct{ role, group string }{
		"minilet-test:kubelet-bootstrap":                     {"system:node-bootstrapper", "system:bootstrappers"},
		"minilet-test:node-autoapprove-bootstrap":            {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
		"minilet-test:node-autoapprove-certificate-rotation": {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
	} {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: binding},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: role.group}},
		}
		_, err := s.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			s.t.Fatalf("binding %s to %s: %v", role.group, role.role, err)
		}
	}
	return s.writeKubeconfig(name, fmt.Sprintf("    token: %s.%s\n", id, secret))
}

// randLower is n random characters of [a-z0-9], as bootstrap token parts
// must be.
func randLower(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// signingDuration is --cluster-signing-duration: Options.SigningDuration,
// else the controller-manager's default of a year.
func (s *Server) signingDuration() string {
	if s.signing > 0 {
		return s.signing.String()
	}
	return (365 * 24 * time.Hour).String()
}
