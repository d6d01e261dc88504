package probe

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/minilet/minilet/internal/errdefs"
)

// ResolvePort turns a probe's port (a number or the name of one of the
// container's ports) into a port number.
func ResolvePort(port intstr.IntOrString, c *v1.Container) (int, error) {
	n := -1
	if port.Type == intstr.String {
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				n = int(p.ContainerPort)
				break
			}
		}
		if n < 0 {
			return 0, fmt.Errorf("container %q has no port named %q: %w", c.Name, port.StrVal, errdefs.ErrInvalidArgument)
		}
	} else {
		n = port.IntValue()
	}
	if n <= 0 || n > 65535 {
		return 0, fmt.Errorf("container %q: probe port %d out of range 1-65535: %w", c.Name, n, errdefs.ErrInvalidArgument)
	}
	return n, nil
}
