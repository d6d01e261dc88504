package podnet

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The pods' MTU is that of the interface carrying the default route: the
// lowest-metric IPv4 default that is up, else the IPv6 one.
func TestDefaultRouteMTU(t *testing.T) {
	const v4Header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	zero := strings.Repeat("0", 32)
	for _, tc := range []struct {
		name     string
		v4, v6   string
		mtus     map[string]string
		want     int
		wantSeen bool
	}{
		{"ipv4 default", v4Header +
			"eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
			"eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
			"", map[string]string{"eth0": "1400"}, 1400, true},
		{"lowest metric wins, down routes ignored", v4Header +
			"wlan0\t00000000\t010200C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n" +
			"eth1\t00000000\t010200C0\t0002\t0\t0\t0\t00000000\t0\t0\t0\n" +
			"eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n",
			"", map[string]string{"eth0": "9000", "wlan0": "1500", "eth1": "1280"}, 9000, true},
		{"ipv6 only", v4Header,
			zero + " 00 " + zero + " 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003 eth0\n",
			map[string]string{"eth0": "1450"}, 1450, true},
		{"no default route", v4Header, "", map[string]string{"eth0": "1500"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procNet := t.TempDir()
			write := func(p, s string) {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(filepath.Join(procNet, "route"), tc.v4)
			write(filepath.Join(procNet, "ipv6_route"), tc.v6)
			mtuOf := func(iface string) (int, error) {
				m, ok := tc.mtus[iface]
				if !ok {
					return 0, os.ErrNotExist
				}
				return strconv.Atoi(m)
			}
			got, ok := defaultRouteMTU(procNet, mtuOf)
			if got != tc.want || ok != tc.wantSeen {
				t.Errorf("defaultRouteMTU = %d, %v; want %d, %v", got, ok, tc.want, tc.wantSeen)
			}
		})
	}
}
