// Package nodeaddr decides the node's addresses: the IP that node status
// reports as InternalIP, that host-network pods get as their pod IP and that
// status.hostIP shows, and the host name the node reports. It is the one
// place that looks at the host's interfaces for this, so the three always
// agree.
package nodeaddr

import (
	"net"
)

// Addresses are the node's addresses.
type Addresses struct {
	// IP is --node-ip when set, else the first address Pick chooses.
	IP string
	// Hostname is the node's name as the kubelet reports it: the
	// --hostname-override when set, else the host name (lowercased).
	Hostname string
}

// Detect returns the node's addresses. nodeIP is --node-ip (nil: detect
// from the host's interfaces); nodeName is the node's name, which already
// is --hostname-override or the lowercased host name.
func Detect(nodeIP net.IP, nodeName string) Addresses {
	a := Addresses{Hostname: nodeName}
	if nodeIP != nil {
		a.IP = nodeIP.String()
		return a
	}
	a.IP = Pick(hostInterfaces())
	return a
}

// Interface is one network interface with its addresses.
type Interface struct {
	Up, Loopback bool
	Addrs        []net.IP
}

// Pick chooses the node IP from the host's interfaces, as the kubelet does
// without --node-ip when the host name does not resolve: the first IPv4
// address of an interface that is up and not loopback; else the first
// global IPv6 address of such an interface; else 127.0.0.1.
func Pick(ifaces []Interface) string {
	var v6 string
	for _, i := range ifaces {
		if !i.Up || i.Loopback {
			continue
		}
		for _, ip := range i.Addrs {
			switch {
			case ip.IsLoopback() || ip.IsLinkLocalUnicast():
			case ip.To4() != nil:
				return ip.String()
			case v6 == "" && ip.IsGlobalUnicast():
				v6 = ip.String()
			}
		}
	}
	if v6 != "" {
		return v6
	}
	return "127.0.0.1"
}

func hostInterfaces() []Interface {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	out := make([]Interface, 0, len(ifaces))
	for _, ifc := range ifaces {
		i := Interface{Up: ifc.Flags&net.FlagUp != 0, Loopback: ifc.Flags&net.FlagLoopback != 0}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				i.Addrs = append(i.Addrs, ipn.IP)
			}
		}
		out = append(out, i)
	}
	return out
}
