// Package clusterbin builds the upstream control-plane binaries (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) from the
// separate module in hack/cluster, once, into a cache keyed by content.
//
// The key is a hash of everything that decides what the build produces:
// hack/cluster's go.mod, go.sum and source files, the build command and
// flags, and the toolchain (`go env` GOVERSION, GOOS, GOARCH, CGO_ENABLED,
// GOAMD64, GOFLAGS, GOEXPERIMENT). File modification times play no part, so
// a fresh clone of an unchanged tree finds the binaries another clone built.
//
// Layout of the cache directory ($MINILET_CLUSTER_CACHE, default
// $HOME/.cache/minilet-cluster):
//
//	build.lock        flock: one process checks, builds and prunes at a time
//	<key>/            the binaries of one key, and inputs.txt saying what made it
//	.tmp-<key>-<pid>/ a build in progress; renamed to <key>/ when complete
//
// A key directory exists only complete (it appears by rename). Each use
// stamps its modification time; the least recently used keys beyond
// [KeepKeys], and any unused for [MaxAge], are removed.
//
// The upstream kubelet is built the same way but apart, on demand only
// ([EnsureKubelet]): it is not one of [Commands], which is what the tests
// and CI build. It lives in hack/cluster/kubelet, a module of its own (so
// that its extra dependencies change neither hack/cluster's go.mod nor the
// control plane's key), under keys named kubelet-<key> with their own lock
// file, so that its several-minute build never holds up the control
// plane's.
//
// The conformance harness's binaries (e2e.test, the agnhost test image's
// program and the ginkgo CLI, [EnsureConformance]) are a third target, also
// on demand only: hack/conformance, keys named conformance-<key>, lock file
// conformance.lock. Nothing CI runs by default builds them; CI's smoke set
// of them runs only when they are already there ([ConformanceCached]).
//
// This package needs only the standard library, so that the Makefile can
// start the build (`go run ./internal/cluster/clusterbin/cmd/clusterbin`)
// before anything else is compiled.
package clusterbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvCache overrides the cache directory (default
// $HOME/.cache/minilet-cluster).
const EnvCache = "MINILET_CLUSTER_CACHE"

// The commands hack/cluster builds, each a directory holding a main package.
const (
	Etcd              = "etcd"
	KubeAPIServer     = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kubectl           = "kubectl"
)

// Commands lists every binary one build produces.
var Commands = []string{Etcd, KubeAPIServer, ControllerManager, Scheduler, Kubectl}

// Kubelet is the upstream kubelet, built only by [EnsureKubelet].
const Kubelet = "kubelet"

// A target is one set of binaries built by `go` commands in one module,
// cached under its own keys.
type target struct {
	what     string // for messages
	dir      func() string
	commands []string // directories of main packages under dir
	outputs  []string // the binaries one build leaves
	schema   string   // first line of the key's inputs
	prefix   string   // of its key directories' names
	lock     string   // its lock file in the cache directory
	skip     []string // subdirectories of dir that are not its input (nested modules)
	// steps, when set, are the target's `go` commands writing into out,
	// run in order; otherwise its one command is buildArgs.
	steps func(out string) []step
}

// A step is one `go` command of a build, with the environment it adds.
type step struct {
	env  []string
	args []string
}

func (s step) String() string {
	return strings.TrimSpace(strings.Join(s.env, " ") + " go " + strings.Join(s.args, " "))
}

// allSteps are t's `go` commands writing into out.
func (t target) allSteps(out string) []step {
	if t.steps != nil {
		return t.steps(out)
	}
	return []step{{args: t.buildArgs(out)}}
}

var controlPlane = target{
	what: "the cluster binaries", dir: ModuleDir, commands: Commands, outputs: Commands,
	schema: "clusterbin/1", lock: "build.lock", skip: []string{Kubelet},
}

var kubeletTarget = target{
	what: "the kubelet", dir: KubeletModuleDir, commands: []string{"."}, outputs: []string{Kubelet},
	schema: "clusterbin-kubelet/1", prefix: "kubelet-", lock: "kubelet.lock",
}

// The conformance harness's binaries, built only by [EnsureConformance].
const (
	// E2ETest is the upstream e2e suite's test binary
	// (`go test -c k8s.io/kubernetes/test/e2e`).
	E2ETest = "e2e.test"
	// Agnhost is the program of the agnhost test image, static.
	Agnhost = "agnhost"
	// Ginkgo is the ginkgo CLI of the version e2e.test is built with, which
	// runs it in several processes.
	Ginkgo = "ginkgo"
)

// ConformanceOutputs lists what [EnsureConformance] builds.
var ConformanceOutputs = []string{E2ETest, Agnhost, Ginkgo}

var conformanceTarget = target{
	what: "the conformance binaries", dir: ConformanceModuleDir, outputs: ConformanceOutputs,
	schema: "clusterbin-conformance/1", prefix: "conformance-", lock: "conformance.lock",
	steps: func(out string) []step {
		return []step{
			// agnhost runs inside images with nothing else: no libc.
			{env: []string{"CGO_ENABLED=0"}, args: slices.Concat([]string{"build"}, buildFlags,
				[]string{"-o", filepath.Join(out, Agnhost), "k8s.io/kubernetes/test/images/agnhost"})},
			{args: slices.Concat([]string{"build"}, buildFlags,
				[]string{"-o", filepath.Join(out, Ginkgo), "github.com/onsi/ginkgo/v2/ginkgo"})},
			// -vet=off: the upstream suite is vetted upstream; vet here
			// would only cost minutes.
			{args: slices.Concat([]string{"test", "-c", "-vet=off"}, buildFlags,
				[]string{"-o", filepath.Join(out, E2ETest), "k8s.io/kubernetes/test/e2e"})},
		}
	},
}

// isKeyDir reports whether name is one of t's key directories.
func (t target) isKeyDir(name string) bool {
	rest, ok := strings.CutPrefix(name, t.prefix)
	return ok && keyName.MatchString(rest)
}

// isTmpDir reports whether name is an interrupted build of t.
func (t target) isTmpDir(name string) bool {
	rest, ok := strings.CutPrefix(name, ".tmp-"+t.prefix)
	if !ok {
		return false
	}
	key, pid, ok := strings.Cut(rest, "-")
	return ok && keyName.MatchString(key) && pid != "" && strings.Trim(pid, "0123456789") == ""
}

// buildFlags cut build time without changing what the programs do:
// -s -w leave out the symbol table and DWARF (the linker's slowest part for
// binaries this size; Go's own stack traces use pclntab and still work).
// No -trimpath, and hack/cluster's go.mod holds the same versions as the
// agent's module for the modules both use: the standard library,
// k8s.io/api, apimachinery, client-go, grpc, protobuf and the rest then
// compile once, shared through the Go build cache between this build and
// the agent's own (vet, lint, the binaries the tests run) — about 350
// CPU-seconds of a fresh CI run. -trimpath would change every compile's
// action ID and share nothing.
var buildFlags = []string{"-ldflags=-s -w"}

// keyEnv is the toolchain configuration that goes into the key.
var keyEnv = []string{"GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED", "GOAMD64", "GOFLAGS", "GOEXPERIMENT"}

// KeepKeys is how many key directories the cache keeps (the current one
// included), so that worktrees of different hack/cluster versions on one
// machine do not evict each other at every run.
const KeepKeys = 3

// MaxAge is how long an unused key directory is kept.
const MaxAge = 7 * 24 * time.Hour

// Set is one complete set of binaries.
type Set struct {
	Dir string // the key directory holding them
	Key string
}

// Path is the path of command (one of [Commands]).
func (s Set) Path(command string) string { return filepath.Join(s.Dir, command) }

// CacheDir is the cache directory.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "minilet-cluster")
}

// ModuleDir is hack/cluster, found from this source file.
func ModuleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "cluster")
}

// KubeletModuleDir is hack/cluster/kubelet, the kubelet's module.
func KubeletModuleDir() string { return filepath.Join(ModuleDir(), Kubelet) }

// ConformanceModuleDir is hack/conformance, the module e2e.test, agnhost
// and ginkgo are built from.
func ConformanceModuleDir() string {
	return filepath.Join(ModuleDir(), "..", "conformance")
}

// BuildArgs is the `go` command line of the one build, writing into out.
func BuildArgs(out string) []string { return controlPlane.buildArgs(out) }

func (t target) buildArgs(out string) []string {
	args := append([]string{"build"}, buildFlags...)
	if len(t.commands) == 1 && t.commands[0] == "." {
		// One main package at the module's root: -o names the file.
		return append(args, "-o", filepath.Join(out, t.outputs[0]), ".")
	}
	args = append(args, "-o", out+string(filepath.Separator))
	for _, c := range t.commands {
		args = append(args, "./"+c)
	}
	return args
}

// onceKey computes a target's key once per process.
type onceKey struct {
	once        sync.Once
	key, inputs string
	err         error
}

func (o *onceKey) get(t target) (string, string, error) {
	o.once.Do(func() { o.key, o.inputs, o.err = t.computeKey(t.dir()) })
	return o.key, o.inputs, o.err
}

var controlPlaneKey, kubeletKey, conformanceKey onceKey

// Key returns the cache key of the current tree and toolchain, and a
// description of what went into it. It is computed once per process.
func Key() (key, inputs string, err error) { return controlPlaneKey.get(controlPlane) }

// KubeletKey is [Key] for the kubelet.
func KubeletKey() (key, inputs string, err error) { return kubeletKey.get(kubeletTarget) }

// ConformanceKey is [Key] for the conformance binaries.
func ConformanceKey() (key, inputs string, err error) {
	return conformanceKey.get(conformanceTarget)
}

func computeKey(mod string) (string, string, error) { return controlPlane.computeKey(mod) }

func (t target) computeKey(mod string) (string, string, error) {
	var desc strings.Builder
	fmt.Fprintf(&desc, "schema: %s\n", t.schema)
	for _, st := range t.allSteps("OUT") {
		fmt.Fprintf(&desc, "command: %s\n", st)
	}
	cmd := exec.Command("go", append([]string{"env"}, keyEnv...)...)
	cmd.Dir = mod
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("go env: %w", err)
	}
	vals := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(vals) != len(keyEnv) {
		return "", "", fmt.Errorf("go env printed %d lines for %d variables", len(vals), len(keyEnv))
	}
	for i, k := range keyEnv {
		fmt.Fprintf(&desc, "%s=%s\n", k, vals[i])
	}
	var files []string
	err = filepath.WalkDir(mod, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mod, path)
		if d.IsDir() && slices.Contains(t.skip, filepath.ToSlash(rel)) {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", mod, err)
	}
	sort.Strings(files)
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(mod, rel))
		if err != nil {
			return "", "", err
		}
		fmt.Fprintf(&desc, "file %s %x\n", rel, sha256.Sum256(b))
	}
	// The description names every input, so its hash is the key.
	sum := sha256.Sum256([]byte(desc.String()))
	return hex.EncodeToString(sum[:8]), desc.String(), nil
}

// Ensure returns the binaries for the current key, building them first if
// the cache lacks them. Processes take turns on the cache's lock file, so
// that of parallel test processes only one builds and the others wait for
// it and then use its result. logf reports progress (nil: quiet).
func Ensure(logf func(format string, args ...any)) (Set, error) {
	return controlPlane.ensure(Key, logf)
}

// EnsureKubelet is [Ensure] for the upstream kubelet (Set.Path([Kubelet])),
// which only the side-by-side benchmark uses. A cold build takes minutes.
func EnsureKubelet(logf func(format string, args ...any)) (Set, error) {
	return kubeletTarget.ensure(KubeletKey, logf)
}

// EnsureConformance is [Ensure] for the conformance harness's binaries
// (Set.Path of [E2ETest], [Agnhost], [Ginkgo]). A cold build takes many
// minutes (e2e.test links most of Kubernetes); `make conformance` is its
// only user.
func EnsureConformance(logf func(format string, args ...any)) (Set, error) {
	return conformanceTarget.ensure(ConformanceKey, logf)
}

// ConformanceCached reports whether the cache already holds every
// conformance binary of the current key, without building them or waiting
// for a build in progress: what a test that is worth running only when
// `make conformance` has paid for the build asks. A complete set counts as
// used (its key directory's time is stamped, for pruning); an incomplete
// or missing one is left alone, and the Set returned with false says where
// it would be.
func ConformanceCached() (Set, bool, error) {
	return conformanceTarget.cached(ConformanceKey)
}

// cached is [target.ensure] without the lock, the build and the pruning.
// A key directory appears only complete (by rename), so no lock is needed
// to trust one that is there.
func (t target) cached(keyf func() (string, string, error)) (Set, bool, error) {
	key, _, err := keyf()
	if err != nil {
		return Set{}, false, err
	}
	set := Set{Dir: filepath.Join(CacheDir(), t.prefix+key), Key: key}
	if !t.complete(set) {
		return set, false, nil // where they would be, for messages
	}
	now := time.Now()
	_ = os.Chtimes(set.Dir, now, now)
	return set, true, nil
}

func (t target) ensure(keyf func() (string, string, error), logf func(format string, args ...any)) (Set, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	key, inputs, err := keyf()
	if err != nil {
		return Set{}, err
	}
	root := CacheDir()
	if err := os.MkdirAll(root, 0o755); err != nil {
		return Set{}, err
	}
	unlock, err := lock(filepath.Join(root, t.lock))
	if err != nil {
		return Set{}, err
	}
	defer unlock()

	set := Set{Dir: filepath.Join(root, t.prefix+key), Key: key}
	if !t.complete(set) {
		if err := t.build(root, set, inputs, logf); err != nil {
			return Set{}, err
		}
	}
	now := time.Now()
	_ = os.Chtimes(set.Dir, now, now) // the last use, for pruning
	t.prune(root, t.prefix+key, now, logf)
	return set, nil
}

func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// complete reports whether every binary of set is there.
func (t target) complete(set Set) bool {
	for _, c := range t.outputs {
		if st, err := os.Stat(set.Path(c)); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

func (t target) build(root string, set Set, inputs string, logf func(string, ...any)) error {
	// A key directory that is incomplete was damaged by hand: start over.
	if err := os.RemoveAll(set.Dir); err != nil {
		return err
	}
	tmp := filepath.Join(root, fmt.Sprintf(".tmp-%s%s-%d", t.prefix, set.Key, os.Getpid()))
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	start := time.Now()
	for _, st := range t.allSteps(tmp) {
		logf("building %s (key %s) in %s: %s", strings.Join(t.outputs, ", "), set.Key, t.dir(), st)
		cmd := exec.Command("go", st.args...)
		cmd.Dir = t.dir()
		cmd.Env = append(os.Environ(), st.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s (%s): %w\n%s", t.what, st, err, out)
		}
	}
	took := time.Since(start).Round(time.Second)
	if err := os.WriteFile(filepath.Join(tmp, "inputs.txt"), []byte(inputs+fmt.Sprintf("built: %s in %s\n", time.Now().UTC().Format(time.RFC3339), took)), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, set.Dir); err != nil {
		return err
	}
	logf("built %s in %s", t.what, took)
	return nil
}

var keyName = regexp.MustCompile(`^[0-9a-f]{16}$`)

// prune removes what the cache no longer needs: interrupted builds, the
// least recently used keys beyond KeepKeys, keys unused for MaxAge, and the
// bin/ directory of the old mtime-keyed layout once it is as stale. It only
// touches names it made, in case the cache directory is shared.
func prune(root, current string, now time.Time, logf func(string, ...any)) {
	controlPlane.prune(root, current, now, logf)
}

func (t target) prune(root, current string, now time.Time, logf func(string, ...any)) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type used struct {
		name string
		at   time.Time
	}
	var keys []used
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == current {
			continue
		}
		if t.isTmpDir(name) {
			// We hold the lock: no build of t is in progress.
			_ = os.RemoveAll(filepath.Join(root, name))
			continue
		}
		legacy := t.prefix == "" && name == "bin" && fileExists(filepath.Join(root, name, KubeAPIServer))
		if !t.isKeyDir(name) && !legacy {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		keys = append(keys, used{name, info.ModTime()})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].at.After(keys[j].at) })
	for i, k := range keys {
		if i+1 < KeepKeys && now.Sub(k.at) < MaxAge {
			continue
		}
		logf("pruning %s %s (last used %s)", t.what, k.name, k.at.Format(time.RFC3339))
		_ = os.RemoveAll(filepath.Join(root, k.name))
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
