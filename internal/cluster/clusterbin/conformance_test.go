package clusterbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConformanceKey: the conformance target's key names its three builds
// (agnhost static) and follows its module's content.
func TestConformanceKey(t *testing.T) {
	mod := t.TempDir()
	writeFile(t, filepath.Join(mod, "go.mod"), "module x\n")
	writeFile(t, filepath.Join(mod, "tools.go"), "package x\n")
	k1, desc, err := conformanceTarget.computeKey(mod)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"schema: clusterbin-conformance/1\n",
		"command: CGO_ENABLED=0 go build -ldflags=-s -w -o OUT/agnhost k8s.io/kubernetes/test/images/agnhost\n",
		"command: go build -ldflags=-s -w -o OUT/ginkgo github.com/onsi/ginkgo/v2/ginkgo\n",
		"command: go test -c -vet=off -ldflags=-s -w -o OUT/e2e.test k8s.io/kubernetes/test/e2e\n",
		"file go.mod ", "file tools.go ",
	} {
		if !strings.Contains(desc, want) {
			t.Errorf("conformance key inputs lack %q:\n%s", want, desc)
		}
	}
	writeFile(t, filepath.Join(mod, "go.mod"), "module x\n\nrequire k8s.io/kubernetes v1.37.3\n")
	if k2, _, _ := conformanceTarget.computeKey(mod); k2 == k1 {
		t.Error("the conformance key did not change with go.mod")
	}
	if filepath.Base(ConformanceModuleDir()) != "conformance" || filepath.Base(filepath.Dir(ConformanceModuleDir())) != "hack" {
		t.Errorf("ConformanceModuleDir() = %s, want .../hack/conformance", ConformanceModuleDir())
	}
}

// TestStepsBuildInOrderWithTheirEnv: a target of several `go` commands
// leaves every output in its key directory, runs each step with the
// environment it names, and records every command in inputs.txt.
func TestStepsBuildInOrderWithTheirEnv(t *testing.T) {
	mod := t.TempDir()
	writeFile(t, filepath.Join(mod, "go.mod"), "module x\n\ngo 1.22\n")
	// b refuses to build unless its step's environment reached `go`.
	writeFile(t, filepath.Join(mod, "a", "main.go"), "package main\n\nfunc main() {}\n")
	writeFile(t, filepath.Join(mod, "b", "main.go"), "//go:build mytag\n\npackage main\n\nfunc main() {}\n")
	tg := target{
		what: "test steps", dir: func() string { return mod }, outputs: []string{"a", "b"},
		schema: "test/1", prefix: "steps-", lock: "steps.lock",
		steps: func(out string) []step {
			return []step{
				{args: []string{"build", "-o", filepath.Join(out, "a"), "./a"}},
				{env: []string{"GOFLAGS=-tags=mytag"}, args: []string{"build", "-o", filepath.Join(out, "b"), "./b"}},
			}
		},
	}
	t.Setenv(EnvCache, t.TempDir())
	set, err := tg.ensure(func() (string, string, error) { return tg.computeKey(mod) }, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(set.Dir), "steps-") || !tg.complete(set) {
		t.Fatalf("key directory %s incomplete", set.Dir)
	}
	inputs, err := os.ReadFile(filepath.Join(set.Dir, "inputs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(inputs), "command: GOFLAGS=-tags=mytag go build -o OUT/b ./b\n") {
		t.Errorf("inputs.txt:\n%s", inputs)
	}
}

// TestCachedNeverBuilds: cached finds a target's binaries only once a build
// has left them all, never builds or leaves anything in the cache itself,
// and agrees with ensure on where they are.
func TestCachedNeverBuilds(t *testing.T) {
	mod := t.TempDir()
	writeFile(t, filepath.Join(mod, "go.mod"), "module x\n\ngo 1.22\n")
	writeFile(t, filepath.Join(mod, "a", "main.go"), "package main\n\nfunc main() {}\n")
	writeFile(t, filepath.Join(mod, "b", "main.go"), "package main\n\nfunc main() {}\n")
	tg := target{
		what: "test cached", dir: func() string { return mod }, outputs: []string{"a", "b"},
		schema: "test/1", prefix: "cached-", lock: "cached.lock",
		steps: func(out string) []step {
			return []step{
				{args: []string{"build", "-o", filepath.Join(out, "a"), "./a"}},
				{args: []string{"build", "-o", filepath.Join(out, "b"), "./b"}},
			}
		},
	}
	keyf := func() (string, string, error) { return tg.computeKey(mod) }
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)

	before, ok, err := tg.cached(keyf)
	if err != nil || ok {
		t.Fatalf("cached() on an empty cache = %v, %v; want false", ok, err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Fatalf("cached() left %d entries in the cache (want none: it must not build or lock)", len(entries))
	}

	built, err := tg.ensure(keyf, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := tg.cached(keyf)
	if err != nil || !ok || got != built || before != built {
		t.Fatalf("after a build: cached() = %+v, %v, %v (before: %+v); want %+v, true", got, ok, err, before, built)
	}

	// A key directory missing one binary (damaged by hand) is not there.
	if err := os.Remove(built.Path("b")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := tg.cached(keyf); err != nil || ok {
		t.Errorf("cached() with b removed = %v, %v; want false", ok, err)
	}
}

// TestConformanceCachedFollowsTheKey: ConformanceCached looks under the
// conformance target's current key, in the cache directory named by
// MINILET_CLUSTER_CACHE.
func TestConformanceCachedFollowsTheKey(t *testing.T) {
	key, _, err := ConformanceKey()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)
	set, ok, err := ConformanceCached()
	want := filepath.Join(cache, "conformance-"+key)
	if err != nil || ok || set.Dir != want || set.Key != key {
		t.Fatalf("ConformanceCached() on an empty cache = %+v, %v, %v; want %s, false", set, ok, err, want)
	}
	for _, c := range ConformanceOutputs {
		writeFile(t, filepath.Join(want, c), "#!/bin/sh\n")
	}
	if set, ok, err := ConformanceCached(); err != nil || !ok || set.Dir != want {
		t.Errorf("ConformanceCached() with every output in place = %+v, %v, %v; want %s, true", set, ok, err, want)
	}
}
