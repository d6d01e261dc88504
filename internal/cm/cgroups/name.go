package cgroups

import (
	"fmt"
	"strings"

	"github.com/minilet/minilet/internal/errdefs"
)

// Name is a cgroup named by its components from the hierarchy root, e.g.
// {"minilet", "kubepods", "burstable", "pod1234"}. An empty Name is the
// root. The naming driver turns it into a path.
type Name []string

// Child returns n extended by one component.
func (n Name) Child(component string) Name {
	out := make(Name, 0, len(n)+1)
	out = append(out, n...)
	return append(out, component)
}

// ParseCgroupfs turns a cgroupfs path such as "/minilet/kubepods" (or the
// --cgroup-root flag value) into a Name; "/" and "" are the root.
func ParseCgroupfs(p string) (Name, error) {
	var n Name
	for _, c := range strings.Split(p, "/") {
		if c == "" {
			continue
		}
		if c == "." || c == ".." {
			return nil, fmt.Errorf("cgroup path %q has a %q component: %w", p, c, errdefs.ErrInvalidArgument)
		}
		n = append(n, c)
	}
	return n, nil
}

// Naming selects how a Name becomes a path in the hierarchy.
type Naming string

// The two naming schemes of the kubelet's --cgroup-driver.
const (
	// NamingCgroupfs joins components with "/": /kubepods/burstable/pod<UID>.
	NamingCgroupfs Naming = "cgroupfs"
	// NamingSystemd nests slices: /kubepods.slice/kubepods-burstable.slice/
	// kubepods-burstable-pod<UID>.slice, with "-" in components escaped as "_".
	// Only the naming is systemd's; the cgroups are still written directly.
	NamingSystemd Naming = "systemd"
)

// Path returns the name's path relative to a hierarchy root (always
// starting with "/").
func (nm Naming) Path(n Name) string {
	if nm == NamingSystemd {
		return n.systemd()
	}
	return "/" + strings.Join(n, "/")
}

// systemd expands the name into nested slices.
func (n Name) systemd() string {
	if len(n) == 0 {
		return "/"
	}
	parts := make([]string, len(n))
	for i, c := range n {
		parts[i] = strings.ReplaceAll(c, "-", "_")
	}
	var b strings.Builder
	for i := range parts {
		b.WriteString("/")
		b.WriteString(strings.Join(parts[:i+1], "-"))
		b.WriteString(".slice")
	}
	return b.String()
}

func validNaming(nm Naming) bool {
	return nm == NamingCgroupfs || nm == NamingSystemd
}
