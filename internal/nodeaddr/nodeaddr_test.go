package nodeaddr

import (
	"net"
	"testing"
)

func ips(s ...string) []net.IP {
	out := make([]net.IP, 0, len(s))
	for _, x := range s {
		out = append(out, net.ParseIP(x))
	}
	return out
}

func TestPick(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ifaces []Interface
		want   string
	}{
		{"nothing", nil, "127.0.0.1"},
		{"loopback only", []Interface{{Up: true, Loopback: true, Addrs: ips("127.0.0.1", "::1")}}, "127.0.0.1"},
		{"first IPv4 of an up interface", []Interface{
			{Up: true, Loopback: true, Addrs: ips("127.0.0.1")},
			{Up: false, Addrs: ips("10.0.0.9")},
			{Up: true, Addrs: ips("fe80::1", "2001:db8::5", "192.0.2.2")},
			{Up: true, Addrs: ips("198.51.100.7")},
		}, "192.0.2.2"},
		{"IPv6 only host", []Interface{{Up: true, Addrs: ips("fe80::1", "2001:db8::5")}}, "2001:db8::5"},
	} {
		if got := Pick(tc.ifaces); got != tc.want {
			t.Errorf("%s: Pick = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestDetectFlagWinsAndHostnameIsNodeName(t *testing.T) {
	a := Detect(net.ParseIP("127.0.0.9"), "edge-1")
	if a.IP != "127.0.0.9" || a.Hostname != "edge-1" {
		t.Errorf("Detect = %+v, want IP 127.0.0.9 (the --node-ip) and Hostname edge-1 (the node name)", a)
	}
	if d := Detect(nil, "n"); net.ParseIP(d.IP) == nil {
		t.Errorf("detected IP %q is not an IP", d.IP)
	}
}
