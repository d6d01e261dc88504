package clusterbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestKeyFollowsContentNotModTime(t *testing.T) {
	mod := t.TempDir()
	writeFile(t, filepath.Join(mod, "go.mod"), "module x\n")
	writeFile(t, filepath.Join(mod, "go.sum"), "")
	writeFile(t, filepath.Join(mod, "etcd", "main.go"), "package main\n")
	key := func() string {
		t.Helper()
		k, desc, err := computeKey(mod)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"GOVERSION=go", "GOARCH=", "command: go build -ldflags=-s -w", "file etcd/main.go "} {
			if !strings.Contains(desc, want) {
				t.Errorf("key inputs lack %q:\n%s", want, desc)
			}
		}
		return k
	}
	k1 := key()
	// A fresh clone: same content, new modification times.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(mod, "etcd", "main.go"), later, later); err != nil {
		t.Fatal(err)
	}
	if k2 := key(); k2 != k1 {
		t.Errorf("key changed with modification times only: %s → %s", k1, k2)
	}
	writeFile(t, filepath.Join(mod, "etcd", "main.go"), "package main // changed\n")
	k3 := key()
	if k3 == k1 {
		t.Error("key did not change with a source file")
	}
	writeFile(t, filepath.Join(mod, "go.sum"), "x v1.0.0 h1:abc=\n")
	if k4 := key(); k4 == k3 {
		t.Error("key did not change with go.sum")
	}
	if !keyName.MatchString(k1) {
		t.Errorf("key %q is not 16 hex digits", k1)
	}
}

func TestPrune(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	mk := func(name string, age time.Duration, files ...string) {
		t.Helper()
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			writeFile(t, filepath.Join(dir, f), "x")
		}
		at := now.Add(-age)
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
	}
	mk("000000000000000a", 0)                     // current
	mk("000000000000000b", time.Hour)             // kept: 2nd most recent
	mk("000000000000000c", 2*time.Hour)           // kept: 3rd
	mk("000000000000000d", 3*time.Hour)           // beyond KeepKeys
	mk("000000000000000e", 30*time.Minute+MaxAge) // too old
	mk(".tmp-000000000000000f-123", 0)            // interrupted build
	mk("bin", 4*time.Hour, KubeAPIServer)         // old layout, least recent
	mk("unrelated", 100*MaxAge)                   // not ours: left alone
	prune(root, "000000000000000a", now, t.Logf)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := "000000000000000a 000000000000000b 000000000000000c unrelated"
	if got := strings.Join(left, " "); got != want {
		t.Errorf("after prune: %s, want %s", got, want)
	}
}

// TestKubeletIsApart: the kubelet's module is no input of the control
// plane's key (adding or changing it rebuilds nothing the tests use), the
// tests' build does not name it, and its own key follows its sources.
func TestKubeletIsApart(t *testing.T) {
	mod := t.TempDir()
	writeFile(t, filepath.Join(mod, "go.mod"), "module x\n")
	writeFile(t, filepath.Join(mod, "etcd", "main.go"), "package main\n")
	k1, _, err := computeKey(mod)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mod, Kubelet, "go.mod"), "module x/kubelet\n")
	writeFile(t, filepath.Join(mod, Kubelet, "main.go"), "package main\n")
	k2, desc, err := computeKey(mod)
	if err != nil {
		t.Fatal(err)
	}
	if k2 != k1 || strings.Contains(desc, Kubelet) {
		t.Errorf("the control plane's key changed with the kubelet's module (%s → %s):\n%s", k1, k2, desc)
	}
	if strings.Contains(strings.Join(BuildArgs("OUT"), " "), Kubelet) {
		t.Errorf("the tests' build names the kubelet: %v", BuildArgs("OUT"))
	}

	kmod := filepath.Join(mod, Kubelet)
	kk1, kdesc, err := kubeletTarget.computeKey(kmod)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(kdesc, "command: go build -ldflags=-s -w -o OUT/kubelet .") || !strings.Contains(kdesc, "file main.go ") {
		t.Errorf("kubelet key inputs:\n%s", kdesc)
	}
	writeFile(t, filepath.Join(kmod, "main.go"), "package main // changed\n")
	if kk2, _, _ := kubeletTarget.computeKey(kmod); kk2 == kk1 {
		t.Error("the kubelet's key did not change with its source")
	}
}

// TestPruneKeepsToItsOwn: pruning the control plane's keys leaves the
// kubelet's (and its build in progress) alone, and the other way round.
func TestPruneKeepsToItsOwn(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	old := now.Add(-2 * MaxAge)
	for _, name := range []string{"000000000000000a", "000000000000000b", "kubelet-000000000000000c",
		"kubelet-000000000000000d", ".tmp-kubelet-000000000000000e-42", ".tmp-000000000000000f-43"} {
		if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(root, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	left := func() string {
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return strings.Join(names, " ")
	}
	prune(root, "000000000000000a", now, t.Logf)
	if got, want := left(), ".tmp-kubelet-000000000000000e-42 000000000000000a kubelet-000000000000000c kubelet-000000000000000d"; got != want {
		t.Errorf("after pruning the control plane: %s, want %s", got, want)
	}
	kubeletTarget.prune(root, "kubelet-000000000000000c", now, t.Logf)
	if got, want := left(), "000000000000000a kubelet-000000000000000c"; got != want {
		t.Errorf("after pruning the kubelet: %s, want %s", got, want)
	}
}
