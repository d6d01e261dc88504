package cleanup

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Only the jumps into portmap's chains are taken out of the built-in
// chains, given back to iptables as the arguments it printed (a quoted
// comment is one argument).
func TestJumpInto(t *testing.T) {
	for _, tc := range []struct {
		rule, chain string
		want        []string
	}{
		{`-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT`, "PREROUTING",
			[]string{"-m", "addrtype", "--dst-type", "LOCAL", "-j", "CNI-HOSTPORT-DNAT"}},
		{`-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ`, "POSTROUTING",
			[]string{"-m", "comment", "--comment", "CNI portfwd requiring masquerade", "-j", "CNI-HOSTPORT-MASQ"}},
		{`-A POSTROUTING -s 10.85.0.2/32 -j CNI-a1b2c3`, "POSTROUTING", nil},
		{`-A OUTPUT -j CNI-HOSTPORT-DNAT`, "PREROUTING", nil},
		{`-N CNI-HOSTPORT-DNAT`, "CNI-HOSTPORT-DNAT", nil},
	} {
		got, ok := jumpInto(tc.rule, tc.chain)
		if ok != (tc.want != nil) || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("jumpInto(%q, %s) = %q, %v; want %q", tc.rule, tc.chain, got, ok, tc.want)
		}
	}
}

// A lease is a file named by an address; host-local's bookkeeping files
// are not leases.
func TestLeasedIPs(t *testing.T) {
	store := t.TempDir()
	for _, f := range []string{"lock", "last_reserved_ip.0", "10.85.0.7", "fd00::3"} {
		if err := os.WriteFile(filepath.Join(store, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := leasedIPs(store); !reflect.DeepEqual(got, []string{"10.85.0.7", "fd00::3"}) {
		t.Errorf("leasedIPs = %v", got)
	}
	if got := leasedIPs(filepath.Join(store, "missing")); got != nil {
		t.Errorf("leasedIPs of a missing store = %v", got)
	}
}
