package cleanup

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"

	"github.com/minilet/minilet/internal/cri/embedded/podnet"
)

// hostLocalDataDir is where the host-local IPAM plugin keeps its leases
// when the network does not say otherwise.
const hostLocalDataDir = "/var/lib/cni/networks"

// portmapChains are the nat chains the portmap plugin creates once per
// host and hooks into the built-in chains; the per-pod chains (CNI-DN-...)
// go with each pod's network teardown.
var portmapChains = []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"}

// defaultNetwork is what cleanup reads of the default network's file.
type defaultNetwork struct {
	Name    string `json:"name"`
	Plugins []struct {
		Type   string `json:"type"`
		Bridge string `json:"bridge"`
		IPAM   struct {
			DataDir string `json:"dataDir"`
		} `json:"ipam"`
	} `json:"plugins"`
}

// removeNetwork removes the default network the agent wrote into its CNI
// conf dir and what running it left on the host: the IP store, the bridge
// and portmap's chains. While any IP of that network is still leased (a
// pod of another agent or runtime on the same network), all of it stays.
// A network the agent did not write is not its to remove.
func removeNetwork(cfg Config, rep *Report) {
	if cfg.CNIConfDir == "" {
		return
	}
	conf := filepath.Join(cfg.CNIConfDir, podnet.DefaultConfName)
	data, err := os.ReadFile(conf)
	if err != nil {
		return
	}
	var nw defaultNetwork
	if err := json.Unmarshal(data, &nw); err != nil || nw.Name == "" || len(nw.Plugins) == 0 || nw.Plugins[0].Type != "bridge" {
		rep.left("%s: not the network minilet writes", conf)
		return
	}
	bridge, dataDir := nw.Plugins[0].Bridge, nw.Plugins[0].IPAM.DataDir
	if dataDir == "" {
		dataDir = hostLocalDataDir
	}
	store := filepath.Join(dataDir, nw.Name)
	if leases := leasedIPs(store); len(leases) > 0 {
		rep.left("CNI network %q (%s, IP store %s, bridge %s, host-port chains): %d IP(s) still leased, to pods of another agent or runtime: %s",
			nw.Name, conf, store, bridge, len(leases), strings.Join(leases, " "))
		return
	}
	remove(rep, conf, "CNI network configuration")
	removeEmptyDirs(cfg.CNIConfDir, filepath.Dir(cfg.CNIConfDir))
	if exists(store) {
		if err := os.RemoveAll(store); err != nil {
			rep.left("IP store %s: %v", store, err)
		} else {
			rep.removed("IP store %s", store)
		}
		removeEmptyDirs(dataDir, "/var/lib")
	}
	if bridge != "" {
		removeBridge(bridge, rep)
	}
	removePortmapChains(rep)
}

// leasedIPs lists the addresses host-local has handed out in store (one
// file per address; its lock and last_reserved_ip files are no leases).
func leasedIPs(store string) []string {
	entries, err := os.ReadDir(store)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// removeBridge deletes the network's bridge when no interface is attached
// to it any more.
func removeBridge(name string, rep *Report) {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return
	}
	if err != nil {
		rep.left("bridge %s: %v", name, err)
		return
	}
	if ports, _ := os.ReadDir(filepath.Join("/sys/class/net", name, "brif")); len(ports) > 0 {
		rep.left("bridge %s: %d interface(s) still attached", name, len(ports))
		return
	}
	if err := netlink.LinkDel(link); err != nil {
		rep.left("bridge %s: %v", name, err)
		return
	}
	rep.removed("bridge %s", name)
}

// removePortmapChains removes portmap's host-wide nat chains and the jumps
// into them, when no host port of any pod is mapped any more (the DNAT
// chain jumps to no per-pod chain).
func removePortmapChains(rep *Report) {
	ipt, err := iptables.New()
	if err != nil {
		rep.left("host-port chains: iptables: %v", err)
		return
	}
	if ok, _ := ipt.ChainExists("nat", portmapChains[0]); !ok {
		return
	}
	rules, err := ipt.List("nat", portmapChains[0])
	if err != nil {
		rep.left("host-port chains: %v", err)
		return
	}
	if len(rules) > 1 { // the first is the chain's own -N line
		rep.left("host-port chains %s: %d host-port rule(s) still in use", portmapChains[0], len(rules)-1)
		return
	}
	for _, builtin := range []string{"PREROUTING", "OUTPUT", "POSTROUTING"} {
		rules, err := ipt.List("nat", builtin)
		if err != nil {
			continue
		}
		for _, r := range rules {
			spec, ok := jumpInto(r, builtin)
			if !ok {
				continue
			}
			if err := ipt.Delete("nat", builtin, spec...); err != nil {
				rep.left("nat rule %q: %v", r, err)
			}
		}
	}
	for _, c := range portmapChains {
		if ok, _ := ipt.ChainExists("nat", c); !ok {
			continue
		}
		if err := ipt.ClearAndDeleteChain("nat", c); err != nil {
			rep.left("nat chain %s: %v", c, err)
			continue
		}
		rep.removed("nat chain %s", c)
	}
}

// jumpInto returns the rule spec of a rule of chain (as iptables -S prints
// it) that jumps into one of portmap's chains.
func jumpInto(rule, chain string) ([]string, bool) {
	f := strings.Fields(rule)
	if len(f) < 3 || f[0] != "-A" || f[1] != chain {
		return nil, false
	}
	for i := 2; i+1 < len(f); i++ {
		if f[i] == "-j" && strings.HasPrefix(f[i+1], "CNI-HOSTPORT-") {
			return unquote(f[2:]), true
		}
	}
	return nil, false
}

// unquote drops the quotes iptables -S puts around a comment, so that the
// spec matches when given back as arguments.
func unquote(spec []string) []string {
	joined := strings.Join(spec, " ")
	var out []string
	for len(joined) > 0 {
		joined = strings.TrimLeft(joined, " ")
		if joined == "" {
			break
		}
		if joined[0] == '"' {
			end := strings.Index(joined[1:], `"`)
			if end < 0 {
				out = append(out, joined[1:])
				break
			}
			out = append(out, joined[1:end+1])
			joined = joined[end+2:]
			continue
		}
		end := strings.IndexByte(joined, ' ')
		if end < 0 {
			out = append(out, joined)
			break
		}
		out = append(out, joined[:end])
		joined = joined[end:]
	}
	return out
}

// remove deletes a file the agent wrote, reporting what happened.
func remove(rep *Report, path, what string) {
	switch err := os.Remove(path); {
	case err == nil:
		rep.removed("%s %s", what, path)
	case errors.Is(err, fs.ErrNotExist):
	default:
		rep.left("%s %s: %v", what, path, err)
	}
}
