package volumes

import v1 "k8s.io/api/core/v1"

// Uses reports whether pod reads the ConfigMap or Secret (kind
// "ConfigMap" or "Secret") called name in its namespace: through a
// volume, a projected source, or its containers' env — so that a change
// of it can make the pod sync at once.
func Uses(pod *v1.Pod, kind, name string) bool {
	cm, secret := kind == "ConfigMap", kind == "Secret"
	for _, vol := range pod.Spec.Volumes {
		switch {
		case cm && vol.ConfigMap != nil && vol.ConfigMap.Name == name,
			secret && vol.Secret != nil && vol.Secret.SecretName == name:
			return true
		case vol.Projected != nil:
			for _, src := range vol.Projected.Sources {
				if cm && src.ConfigMap != nil && src.ConfigMap.Name == name ||
					secret && src.Secret != nil && src.Secret.Name == name {
					return true
				}
			}
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, from := range c.EnvFrom {
				if cm && from.ConfigMapRef != nil && from.ConfigMapRef.Name == name ||
					secret && from.SecretRef != nil && from.SecretRef.Name == name {
					return true
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if cm && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == name ||
					secret && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == name {
					return true
				}
			}
		}
	}
	return false
}
