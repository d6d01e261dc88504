package podspec

import v1 "k8s.io/api/core/v1"

// IsSidecar reports whether an init container is a sidecar: restartPolicy
// Always, so it keeps running beside the app containers.
func IsSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}
