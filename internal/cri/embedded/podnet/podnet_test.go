package podnet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/errdefs"
)

func newTestNetwork(t *testing.T, confDir string) *Network {
	t.Helper()
	n, err := New(Config{ConfDir: confDir, BinDirs: []string{t.TempDir()}, CacheDir: t.TempDir(),
		HostMTU: func() (int, bool) { return 1400, true }})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An empty conf dir gets the default network, written once; the first
// file in lexical order wins; a single-plugin .conf is a one-plugin list;
// a broken or oversize file is an error naming it.
func TestNetworkConfiguration(t *testing.T) {
	dir := t.TempDir()
	n := newTestNetwork(t, dir)
	list, err := n.conf()
	if err != nil || list.Name != "minilet" || len(list.Plugins) != 2 {
		t.Fatalf("default network = %+v, %v; want minilet with bridge and portmap", list, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, DefaultConfName)); err != nil || !strings.Contains(string(data), `"mtu": 1400`) {
		t.Fatalf("default conflist not written with the host's MTU: %v\n%s", err, data)
	}
	if list.Plugins[0].Network.Type != "bridge" || !strings.Contains(string(list.Plugins[0].Bytes), `"mtu":1400`) {
		t.Fatalf("the bridge plugin does not carry the MTU: %s", list.Plugins[0].Bytes)
	}

	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "20-other.conflist"), []byte(`{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-single.conf"), []byte(`{"cniVersion":"0.4.0","name":"single","type":"ptp"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n = newTestNetwork(t, dir)
	list, err = n.conf()
	if err != nil || list.Name != "single" || len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "ptp" {
		t.Fatalf("conf = %+v, %v; want the single-plugin 10-single.conf as a list", list, err)
	}
	if _, err := os.Stat(filepath.Join(dir, DefaultConfName)); err == nil {
		t.Error("the default network was written beside an existing one")
	}

	dir = t.TempDir()
	bad := filepath.Join(dir, "10-bad.conflist")
	if err := os.WriteFile(bad, []byte(`{"name":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newTestNetwork(t, dir).conf(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("broken conflist: %v, want an error naming %s", err, bad)
	}
	if err := os.WriteFile(bad, make([]byte, maxConfSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newTestNetwork(t, dir).conf(); err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Errorf("oversize conflist: %v, want a size error", err)
	}
}

// Without plugins, a pod's attach fails with an error that says which
// plugins are missing where and how to get them; the check at start
// writes nothing into an empty conf dir.
func TestMissingPluginsSayHowToGetThem(t *testing.T) {
	dir := t.TempDir()
	n := newTestNetwork(t, dir)
	err := n.CheckPlugins()
	var missing *MissingPluginsError
	if !errors.As(err, &missing) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("CheckPlugins = %v, want a MissingPluginsError", err)
	}
	for _, want := range []string{"bridge, portmap", "--cni-bin-dir", "containernetworking-plugins", "scripts/cni-plugins.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("checking the plugins wrote into the conf dir: %v", entries)
	}
	_, err = n.Attach(context.Background(), Pod{SandboxID: "s1", Name: "p", Namespace: "default", UID: "u", NetNS: "/proc/self/ns/net"})
	if !errors.As(err, &missing) {
		t.Fatalf("Attach = %v, want a MissingPluginsError", err)
	}
}
