package cluster

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConfigMap reads a ConfigMap a pod of this node refers to (the Node
// authorizer allows exactly those).
func (c *Cluster) ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	cm, err := c.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		c.objects.read(ObjectRef{Kind: "ConfigMap", Namespace: namespace, Name: name})
	}
	if err != nil {
		return nil, classify(err, "getting configmap "+namespace+"/"+name)
	}
	return cm, nil
}

// Secret reads a Secret a pod of this node refers to.
func (c *Cluster) Secret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	s, err := c.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err == nil || apierrors.IsNotFound(err) {
		c.objects.read(ObjectRef{Kind: "Secret", Namespace: namespace, Name: name})
	}
	if err != nil {
		return nil, classify(err, "getting secret "+namespace+"/"+name)
	}
	return s, nil
}

// ServiceAccountToken requests a token of pod's service account bound to
// the pod (TokenRequest), as the kubelet does for projected tokens.
func (c *Cluster) ServiceAccountToken(ctx context.Context, pod *v1.Pod, spec authenticationv1.TokenRequestSpec) (*authenticationv1.TokenRequestStatus, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	tr, err := c.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return nil, classify(err, fmt.Sprintf("requesting a token of service account %s/%s for pod %s", pod.Namespace, sa, pod.Name))
	}
	return &tr.Status, nil
}

// PersistentVolumeClaim reads a claim a pod of this node mounts (the Node
// authorizer allows exactly those).
func (c *Cluster) PersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	pvc, err := c.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, classify(err, "getting persistentvolumeclaim "+namespace+"/"+name)
	}
	return pvc, nil
}

// PersistentVolume reads the volume bound to such a claim.
func (c *Cluster) PersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, classify(err, "getting persistentvolume "+name)
	}
	return pv, nil
}
