package podnet

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/minilet/minilet/internal/errdefs"
)

// PluginsHint says where the CNI plugins come from, for the error a pod
// sees when they are missing and the agent's warning at start.
const PluginsHint = "install Debian's containernetworking-plugins package (plugins in /usr/lib/cni), " +
	"or build them with scripts/cni-plugins.sh from the minilet repository and pass the directory it prints as --cni-bin-dir"

// MissingPluginsError is a network configuration whose plugins are not in
// the plugin directories. It matches errdefs.ErrUnavailable.
type MissingPluginsError struct {
	Network string
	Plugins []string
	BinDirs []string
}

func (e *MissingPluginsError) Error() string {
	return fmt.Sprintf("CNI network %q needs plugin(s) %s, not found in %s (--cni-bin-dir): %s",
		e.Network, strings.Join(e.Plugins, ", "), strings.Join(e.BinDirs, " "), PluginsHint)
}

// Unwrap classifies the error.
func (e *MissingPluginsError) Unwrap() error { return errdefs.ErrUnavailable }

// CheckPlugins reports, without changing anything on the host, whether the
// plugins of the network pods would be attached to are installed: the
// first configuration in the conf dir, or the default one an empty conf
// dir would get. It returns a *MissingPluginsError when some are missing.
func (n *Network) CheckPlugins() error {
	list, err := n.plannedConf()
	if err != nil {
		return err
	}
	return n.checkPlugins(list)
}

func (n *Network) plannedConf() (*libcni.NetworkConfigList, error) {
	files, err := confFiles(n.confDir)
	if err == nil && len(files) > 0 {
		return n.conf()
	}
	return libcni.NetworkConfFromBytes([]byte(DefaultConfList))
}

func (n *Network) checkPlugins(list *libcni.NetworkConfigList) error {
	var missing []string
	for _, p := range list.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, n.binDirs); err != nil {
			missing = append(missing, p.Network.Type)
		}
	}
	if len(missing) > 0 {
		return &MissingPluginsError{Network: list.Name, Plugins: missing, BinDirs: n.binDirs}
	}
	return nil
}
