// Package podnet attaches pod sandboxes of the embedded runtime to the
// network through CNI, as containerd and CRI-O do: the first network
// configuration in ConfDir (lexical order, .conflist, .conf or .json) is
// run by libcni with the plugins of BinDirs against the pod's network
// namespace (whose lo package podns brought up, as the loopback plugin
// would), and the result's addresses are the pod's IPs. Host ports travel as the portMappings
// capability (the portmap plugin). When ConfDir holds no configuration,
// DefaultConfList is written there first, as podman and containerd's
// packaged defaults do.
package podnet

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/minilet/minilet/internal/boundedread"
)

// DefaultConfList is the network written into an empty ConfDir (with the
// MTU of the host's default-route interface, see DefaultRouteMTU): a bridge
// (minilet0, the host's gateway into 10.85.0.0/16, with masquerading so
// that pods reach what the host reaches) with addresses from host-local
// IPAM, whose allocations are kept host-wide (/var/lib/cni/networks) so
// that every agent and runtime using this network shares one pool, and
// host ports through portmap.
//
// The file is also what scripts/containerd-up.sh gives the tests'
// containerd, so that both runtimes attach pods the same way.
//
//go:embed default.conflist
var DefaultConfList string

// DefaultConfName is the file DefaultConfList is written to.
const DefaultConfName = "10-minilet.conflist"

// maxConfSize bounds a network configuration file.
const maxConfSize = 1 << 20

// Config configures pod networking.
type Config struct {
	// ConfDir holds the network configurations. Required.
	ConfDir string
	// BinDirs are searched, in order, for plugins. Required.
	BinDirs []string
	// CacheDir keeps libcni's record of each attachment, which DEL reads.
	// Required (the agent gives <root-dir>/cni/cache).
	CacheDir string
	// HostMTU gives the MTU the default network's bridge and pod
	// interfaces get. Default: DefaultRouteMTU (ok false: the plugin's
	// default, 1500).
	HostMTU func() (mtu int, ok bool)
	Logger  *slog.Logger
}

// Network attaches and detaches pods.
type Network struct {
	log     *slog.Logger
	confDir string
	cni     *libcni.CNIConfig
	hostMTU func() (int, bool)
	binDirs []string

	writeDefault sync.Once
}

// Pod names one pod sandbox to the plugins.
type Pod struct {
	SandboxID string
	Name      string
	Namespace string
	UID       string
	// NetNS is the path of the pod's network namespace.
	NetNS string
	// Ports are the pod's host ports (portmap's portMappings).
	Ports []PortMapping
}

// PortMapping is one host port, in the portmap plugin's terms.
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"` // tcp, udp or sctp
	HostIP        string `json:"hostIP,omitempty"`
}

// Attachment is what Attach did.
type Attachment struct {
	// Network is the name of the network configuration used; Detach needs
	// it.
	Network string
	// IPs are the pod's addresses, IPv4 first.
	IPs []string
}

// New returns pod networking over cfg.
func New(cfg Config) (*Network, error) {
	switch {
	case cfg.ConfDir == "":
		return nil, errors.New("pod network: field ConfDir (--cni-conf-dir) is required")
	case len(cfg.BinDirs) == 0:
		return nil, errors.New("pod network: field BinDirs (--cni-bin-dir) is required")
	case cfg.CacheDir == "":
		return nil, errors.New("pod network: field CacheDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HostMTU == nil {
		cfg.HostMTU = DefaultRouteMTU
	}
	return &Network{
		hostMTU: cfg.HostMTU,
		binDirs: cfg.BinDirs,
		log:     cfg.Logger.With("component", "podnet"),
		confDir: cfg.ConfDir,
		cni:     libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cfg.CacheDir, nil),
	}, nil
}

// Attach runs CNI ADD for pod. On failure what was added is deleted again.
func (n *Network) Attach(ctx context.Context, pod Pod) (Attachment, error) {
	list, err := n.conf()
	if err != nil {
		return Attachment{}, err
	}
	if err := n.checkPlugins(list); err != nil {
		return Attachment{}, err
	}
	res, err := n.cni.AddNetworkList(ctx, list, n.runtimeConf(pod))
	if err != nil {
		_ = n.del(ctx, list, pod)
		return Attachment{}, fmt.Errorf("CNI network %q: %w", list.Name, err)
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		_ = n.del(ctx, list, pod)
		return Attachment{}, fmt.Errorf("CNI network %q: read the result: %w", list.Name, err)
	}
	var v4, v6 []string
	for _, ip := range cur.IPs {
		if ip.Address.IP.To4() != nil {
			v4 = append(v4, ip.Address.IP.String())
		} else {
			v6 = append(v6, ip.Address.IP.String())
		}
	}
	ips := append(v4, v6...)
	if len(ips) == 0 {
		_ = n.del(ctx, list, pod)
		return Attachment{}, fmt.Errorf("CNI network %q gave the pod no IP address", list.Name)
	}
	return Attachment{Network: list.Name, IPs: ips}, nil
}

// Detach runs CNI DEL for pod on the network it was attached to (by the
// configuration libcni cached at ADD, else today's). The netns may be gone
// already (plugins then release what they hold outside it: IPs, host port
// rules). Detaching twice is not an error.
func (n *Network) Detach(ctx context.Context, pod Pod, network string) error {
	list, err := n.conf()
	if err != nil {
		return err
	}
	if network != "" && list.Name != network {
		if cached, rt, err := n.cni.GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: network}, n.runtimeConf(pod)); err == nil && cached != nil && rt != nil {
			if l, err := libcni.NetworkConfFromBytes(cached); err == nil {
				if l, err = asList(l, cached); err == nil {
					list = l
				}
			}
		}
	}
	return n.del(ctx, list, pod)
}

func (n *Network) del(ctx context.Context, list *libcni.NetworkConfigList, pod Pod) error {
	if err := n.cni.DelNetworkList(ctx, list, n.runtimeConf(pod)); err != nil {
		return fmt.Errorf("CNI network %q: delete: %w", list.Name, err)
	}
	return nil
}

// runtimeConf is what the plugins are told about the pod: the CNI_ARGS
// Kubernetes runtimes pass, and its host ports.
func (n *Network) runtimeConf(pod Pod) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{
		ContainerID: pod.SandboxID,
		NetNS:       pod.NetNS,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", pod.Namespace},
			{"K8S_POD_NAME", pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", pod.SandboxID},
			{"K8S_POD_UID", pod.UID},
		},
	}
	ports := make([]PortMapping, 0, len(pod.Ports))
	ports = append(ports, pod.Ports...)
	rt.CapabilityArgs = map[string]interface{}{"portMappings": ports}
	return rt
}

// conf loads the first network configuration in the conf dir, writing the
// default one first if there is none.
func (n *Network) conf() (*libcni.NetworkConfigList, error) {
	files, err := confFiles(n.confDir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		var werr error
		n.writeDefault.Do(func() { werr = n.writeDefaultConf() })
		if werr != nil {
			return nil, werr
		}
		if files, err = confFiles(n.confDir); err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("no CNI network configuration in %s (--cni-conf-dir)", n.confDir)
		}
	}
	data, err := boundedread.File(files[0], maxConfSize)
	if err != nil {
		return nil, fmt.Errorf("CNI network configuration %s: %w", files[0], err)
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err == nil {
		list, err = asList(list, data)
	}
	if err != nil {
		return nil, fmt.Errorf("CNI network configuration %s: %w", files[0], err)
	}
	return list, nil
}

func (n *Network) writeDefaultConf() error {
	if err := os.MkdirAll(n.confDir, 0o755); err != nil {
		return fmt.Errorf("create --cni-conf-dir %s: %w", n.confDir, err)
	}
	p := filepath.Join(n.confDir, DefaultConfName)
	conf, mtu := DefaultConfList, 0
	if m, ok := n.hostMTU(); ok {
		var err error
		if conf, err = withMTU(DefaultConfList, m); err != nil {
			return err
		}
		mtu = m
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write the default CNI network: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("write the default CNI network: %w", err)
	}
	n.log.Info("no CNI network configured; wrote the default bridge network", "path", p, "mtu", mtu)
	return nil
}

// asList turns a single-plugin configuration (a .conf file: a "type" and
// no "plugins") into a one-plugin list, as runtimes still accept them.
func asList(list *libcni.NetworkConfigList, data []byte) (*libcni.NetworkConfigList, error) {
	if len(list.Plugins) > 0 {
		return list, nil
	}
	var one struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Type       string `json:"type"`
	}
	if err := json.Unmarshal(data, &one); err != nil {
		return nil, err
	}
	if one.Type == "" {
		return nil, errors.New("neither plugins nor type given")
	}
	wrapped, err := json.Marshal(map[string]any{"cniVersion": one.CNIVersion, "name": one.Name, "plugins": []json.RawMessage{data}})
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(wrapped)
}

func confFiles(dir string) ([]string, error) {
	files, err := libcni.ConfFiles(dir, []string{".conflist", ".conf", ".json"})
	if err != nil {
		return nil, fmt.Errorf("read --cni-conf-dir %s: %w", dir, err)
	}
	sort.Strings(files)
	return files, nil
}
