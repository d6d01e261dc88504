package podnet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newTestNetwork(t *testing.T, confDir string) *Network {
	t.Helper()
	n, err := New(Config{ConfDir: confDir, BinDirs: []string{t.TempDir()}, CacheDir: t.TempDir()})
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
	if data, err := os.ReadFile(filepath.Join(dir, DefaultConfName)); err != nil || string(data) != DefaultConfList {
		t.Fatalf("default conflist not written: %v", err)
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
