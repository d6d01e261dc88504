package kuberuntime

import (
	"github.com/minilet/minilet/internal/container"
)

type containerView struct {
	e  *env
	ps *container.PodStatus
}

// attempts counts the runtime's attempts of the named container.
func (v *containerView) attempts(name string) int {
	n := 0
	for _, c := range v.ps.Containers {
		if c.Name == name {
			n++
		}
	}
	return n
}

func (v *containerView) state(name string) container.State {
	if c := v.ps.FindContainer(name); c != nil {
		return c.State
	}
	return ""
}
