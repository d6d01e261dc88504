package podnet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultRouteMTU is the MTU of the interface that carries the host's
// default route (IPv4, else IPv6), which is what pods' traffic leaving the
// host goes through: a pod interface larger than it has its big packets
// dropped on the way out (connections hang on large transfers). ok is
// false when the host has no default route.
func DefaultRouteMTU() (mtu int, ok bool) {
	return defaultRouteMTU("/proc/net", interfaceMTU)
}

// interfaceMTU asks the kernel (rtnetlink, in this process's network
// namespace; /sys/class/net shows the namespace that mounted sysfs).
func interfaceMTU(name string) (int, error) {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return iface.MTU, nil
}

func defaultRouteMTU(procNet string, ifaceMTU func(string) (int, error)) (int, bool) {
	iface := defaultRouteInterface(filepath.Join(procNet, "route"), parseRouteV4)
	if iface == "" {
		iface = defaultRouteInterface(filepath.Join(procNet, "ipv6_route"), parseRouteV6)
	}
	if iface == "" {
		return 0, false
	}
	mtu, err := ifaceMTU(iface)
	if err != nil || mtu <= 0 {
		return 0, false
	}
	return mtu, true
}

// defaultRouteInterface returns the interface of the default route with
// the lowest metric in a /proc/net route table, "" if there is none.
func defaultRouteInterface(path string, parse func(fields []string) (iface string, metric uint64, isDefault bool)) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	best, bestMetric := "", uint64(0)
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		iface, metric, ok := parse(strings.Fields(sc.Text()))
		if ok && iface != "lo" && (best == "" || metric < bestMetric) {
			best, bestMetric = iface, metric
		}
	}
	return best
}

// parseRouteV4 reads a line of /proc/net/route: Iface Destination Gateway
// Flags RefCnt Use Metric Mask ...; a default route has destination and
// mask 0 and the route is up (flag 0x1).
func parseRouteV4(f []string) (string, uint64, bool) {
	if len(f) < 8 || f[1] != "00000000" || f[7] != "00000000" {
		return "", 0, false
	}
	flags, err := strconv.ParseUint(f[3], 16, 32)
	if err != nil || flags&0x1 == 0 {
		return "", 0, false
	}
	metric, _ := strconv.ParseUint(f[6], 10, 64)
	return f[0], metric, true
}

// parseRouteV6 reads a line of /proc/net/ipv6_route: destination, its
// prefix length, source, its prefix length, next hop, metric, refcount,
// use, flags, interface; a default route is ::/0 through a gateway
// (RTF_GATEWAY 0x2, and up 0x1).
func parseRouteV6(f []string) (string, uint64, bool) {
	if len(f) < 10 || f[0] != strings.Repeat("0", 32) || f[1] != "00" {
		return "", 0, false
	}
	flags, err := strconv.ParseUint(f[8], 16, 32)
	if err != nil || flags&0x3 != 0x3 {
		return "", 0, false
	}
	metric, _ := strconv.ParseUint(f[5], 16, 64)
	return f[9], metric, true
}

// withMTU returns the conflist conf with the first plugin's "mtu" set to
// mtu (the bridge plugin's field for the bridge and the pods' veths).
func withMTU(conf string, mtu int) (string, error) {
	var list map[string]any
	if err := json.Unmarshal([]byte(conf), &list); err != nil {
		return "", fmt.Errorf("default CNI network: %w", err)
	}
	plugins, _ := list["plugins"].([]any)
	if len(plugins) == 0 {
		return "", fmt.Errorf("default CNI network: no plugins")
	}
	first, ok := plugins[0].(map[string]any)
	if !ok {
		return "", fmt.Errorf("default CNI network: first plugin is not an object")
	}
	first["mtu"] = mtu
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return "", fmt.Errorf("default CNI network: %w", err)
	}
	return string(out) + "\n", nil
}
