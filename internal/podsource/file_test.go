package podsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podspec"
)

const node = "Node1"

// waitDeadline is generous: the machine may be busy with other tests.
const waitDeadline = 30 * time.Second

func podYAML(name, cmd string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - name: main
    image: host
    command: ["sh", "-c", %q]
`, name, cmd)
}

func podJSON(name string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q},
 "spec":{"containers":[{"name":"main","image":"host","command":["sleep","60"]}]}}`, name)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// errSink collects OnError calls.
type errSink struct {
	mu   sync.Mutex
	errs map[string][]error
}

func (e *errSink) on(path string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.errs == nil {
		e.errs = map[string][]error{}
	}
	e.errs[path] = append(e.errs[path], err)
}

func (e *errSink) get(path string) []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs[path]...)
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func names(pods []*v1.Pod) string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name)
	}
	sort.Strings(n)
	return strings.Join(n, ",")
}

// waitUpdate reads snapshots until one satisfies ok, failing after the deadline.
func waitUpdate(t *testing.T, ch <-chan Update, what string, ok func([]*v1.Pod) bool) []*v1.Pod {
	t.Helper()
	deadline := time.After(waitDeadline)
	var last []*v1.Pod
	for {
		select {
		case u := <-ch:
			last = u.Pods
			if ok(u.Pods) {
				return u.Pods
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s; last snapshot: [%s]", what, names(last))
		}
	}
}

func waitNames(t *testing.T, ch <-chan Update, want string) []*v1.Pod {
	t.Helper()
	return waitUpdate(t, ch, "pods ["+want+"]", func(p []*v1.Pod) bool { return names(p) == want })
}

func uidOf(pods []*v1.Pod, name string) string {
	for _, p := range pods {
		if p.Name == name {
			return string(p.UID)
		}
	}
	return ""
}

func startFile(t *testing.T, cfg FileConfig) *FileSource {
	t.Helper()
	cfg.NodeName = node
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	s, err := NewFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, s.Run)
	return s
}

// runInBackground runs a source until the test ends, then checks that Run
// returned nil.
func runInBackground(t *testing.T, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// The watcher reacts to create, modify, rename and delete without waiting
// for the periodic re-read (Period is an hour here).
func TestFileSourceFollowsDirectoryChanges(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "web.yaml"), podYAML("web", "sleep 60"))
	write(t, filepath.Join(dir, ".web.yaml.swp"), "garbage: [")
	write(t, filepath.Join(dir, ".hidden.yaml"), podYAML("hidden", "sleep 60"))
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sink errSink
	s := startFile(t, FileConfig{Path: dir, Period: time.Hour, OnError: sink.on})

	pods := waitNames(t, s.Updates(), "web-node1")
	p := pods[0]
	if p.Namespace != "default" || p.Spec.NodeName != node || p.Annotations[podspec.AnnotationConfigSource] != "file" {
		t.Fatalf("static pod identity not applied: %+v", p.ObjectMeta)
	}
	webUID := string(p.UID)

	write(t, filepath.Join(dir, "job.json"), podJSON("job"))
	pods = waitNames(t, s.Updates(), "job-node1,web-node1")
	jobUID := uidOf(pods, "job-node1")

	write(t, filepath.Join(dir, "web.yaml"), podYAML("web", "sleep 61"))
	pods = waitUpdate(t, s.Updates(), "web with a new UID", func(p []*v1.Pod) bool {
		return names(p) == "job-node1,web-node1" && uidOf(p, "web-node1") != webUID
	})
	if uidOf(pods, "job-node1") != jobUID {
		t.Fatal("editing web.yaml changed the job pod")
	}

	if err := os.Rename(filepath.Join(dir, "job.json"), filepath.Join(dir, "job2.json")); err != nil {
		t.Fatal(err)
	}
	waitUpdate(t, s.Updates(), "job under its new file", func(p []*v1.Pod) bool {
		return names(p) == "job-node1,web-node1" && uidOf(p, "job-node1") != jobUID
	})

	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	waitNames(t, s.Updates(), "job-node1")
	if errs := sink.get(filepath.Join(dir, ".web.yaml.swp")); len(errs) != 0 {
		t.Fatalf("dotfile was parsed: %v", errs)
	}
}

// A bad manifest is reported with its file and field and does not affect
// other files; fixing it brings its pod.
func TestFileSourceBadManifests(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "a-good.yaml")
	unknown := filepath.Join(dir, "b-unknown.yaml")
	kind := filepath.Join(dir, "c-kind.yaml")
	syntax := filepath.Join(dir, "d-syntax.yaml")
	invalid := filepath.Join(dir, "e-invalid.yaml")
	write(t, good, podYAML("good", "sleep 60"))
	write(t, unknown, strings.Replace(podYAML("unknown", "sleep 60"), "    image: host\n", "    image: host\n    imagePullPolicyy: Never\n", 1))
	write(t, kind, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n")
	write(t, syntax, "apiVersion: v1\nkind: Pod\nmetadata: [\n")
	write(t, invalid, podYAML("invalid", "sleep 60")+`    livenessProbe:
      exec: {command: ["true"]}
      successThreshold: 2
`)
	var sink errSink
	s := startFile(t, FileConfig{Path: dir, Period: time.Hour, OnError: sink.on})
	waitNames(t, s.Updates(), "good-node1")

	for path, want := range map[string]string{
		unknown: `unknown field "spec.containers[0].imagePullPolicyy"`,
		kind:    `kind "Deployment"`,
		syntax:  "d-syntax.yaml",
		invalid: "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
	} {
		errs := sink.get(path)
		if len(errs) != 1 {
			t.Fatalf("%s: want exactly one reported error, got %v", path, errs)
		}
		if msg := errs[0].Error(); !strings.Contains(msg, want) || !strings.Contains(msg, path) {
			t.Errorf("%s: error %q should name the file and contain %q", path, msg, want)
		}
		if !errors.Is(errs[0], errdefs.ErrInvalidArgument) {
			t.Errorf("%s: error is not InvalidArgument: %v", path, errs[0])
		}
	}

	write(t, unknown, podYAML("unknown", "sleep 60"))
	waitNames(t, s.Updates(), "good-node1,unknown-node1")
}

func TestFileSourceMultiDocumentAndDuplicates(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "# two pods\n---\n"+podYAML("one", "sleep 60")+"---\n# empty\n---\n"+podYAML("two", "sleep 60"))
	dup := filepath.Join(dir, "b.yaml")
	write(t, dup, podYAML("two", "sleep 99")+"---\n"+podYAML("three", "sleep 60"))
	var sink errSink
	s, err := NewFile(FileConfig{NodeName: node, Path: dir, Logger: testLogger(t), OnError: sink.on})
	if err != nil {
		t.Fatal(err)
	}
	s.Step()
	u := <-s.Updates()
	if got := names(u.Pods); got != "one-node1,three-node1,two-node1" {
		t.Fatalf("pods %s", got)
	}
	for _, p := range u.Pods {
		if p.Name == "two-node1" && p.Spec.Containers[0].Command[2] != "sleep 60" {
			t.Fatal("the duplicate from the later file won")
		}
	}
	errs := sink.get(dup)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), filepath.Join(dir, "a.yaml")) || !errors.Is(errs[0], errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate not reported naming both files: %v", errs)
	}
	// The same problem is not reported again on the next read.
	s.Step()
	if n := len(sink.get(dup)); n != 1 {
		t.Fatalf("duplicate reported %d times", n)
	}
}

// Driven step by step with a fake clock: snapshots are sent only on change,
// and config.seen stays the time a pod version was first seen.
func TestFileSourceStepOnlyOnChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	s, err := NewFile(FileConfig{NodeName: node, Path: dir, Clock: clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-s.Updates():
		t.Fatalf("snapshot before the first read: %+v", u)
	default:
	}
	s.Step() // missing directory: an empty set, still sent
	if u := <-s.Updates(); len(u.Pods) != 0 || u.Source != "file" {
		t.Fatalf("missing dir: %+v", u)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.yaml"), podYAML("a", "sleep 60"))
	clk.Step(time.Minute)
	s.Step()
	u := <-s.Updates()
	if names(u.Pods) != "a-node1" || u.Pods[0].Annotations[podspec.AnnotationConfigSeen] != "2026-03-01T10:01:00Z" {
		t.Fatalf("first: %s %v", names(u.Pods), u.Pods[0].Annotations)
	}

	clk.Step(time.Minute)
	s.Step()
	select {
	case u := <-s.Updates():
		t.Fatalf("snapshot sent without a change: %s", names(u.Pods))
	default:
	}

	write(t, filepath.Join(dir, "b.yaml"), podYAML("b", "sleep 60"))
	clk.Step(time.Minute)
	s.Step()
	u = <-s.Updates()
	seen := map[string]string{}
	for _, p := range u.Pods {
		seen[p.Name] = p.Annotations[podspec.AnnotationConfigSeen]
	}
	if seen["a-node1"] != "2026-03-01T10:01:00Z" || seen["b-node1"] != "2026-03-01T10:03:00Z" {
		t.Fatalf("seen times %v", seen)
	}
}

func TestFileSourceSingleFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "only.yaml")
	write(t, path, podYAML("only", "sleep 60"))
	write(t, filepath.Join(dir, "other.yaml"), podYAML("other", "sleep 60"))
	s := startFile(t, FileConfig{Path: path, Period: time.Hour})
	pods := waitNames(t, s.Updates(), "only-node1")
	uid := pods[0].UID
	write(t, path, podYAML("only", "sleep 62"))
	waitUpdate(t, s.Updates(), "edited single file", func(p []*v1.Pod) bool {
		return names(p) == "only-node1" && p[0].UID != uid
	})
}

func TestNewFileRejectsBadConfig(t *testing.T) {
	for _, cfg := range []FileConfig{{Path: "/x"}, {NodeName: "n"}, {NodeName: "n", Path: "/x", Period: -1}} {
		if _, err := NewFile(cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewFile(%+v) = %v, want InvalidArgument", cfg, err)
		}
	}
}

// A manifest that parsed before and is now half-written (or broken by an
// edit) keeps its pod, with the error reported, until it parses again; a
// removed file drops its pod. A file that never parsed contributes none.
func TestFileSourceBrokenSaveKeepsLastGoodPods(t *testing.T) {
	dir := t.TempDir()
	web := filepath.Join(dir, "web.yaml")
	other := filepath.Join(dir, "other.yaml")
	write(t, web, podYAML("web", "sleep 60"))
	var sink errSink
	s, err := NewFile(FileConfig{NodeName: node, Path: dir, Clock: clocktesting.NewFakeClock(time.Now()), Logger: testLogger(t), OnError: sink.on})
	if err != nil {
		t.Fatal(err)
	}
	s.Step()
	first := <-s.Updates()
	if got := names(first.Pods); got != "web-node1" {
		t.Fatalf("first snapshot = %s", got)
	}
	uid := uidOf(first.Pods, "web-node1")

	full := podYAML("web", "sleep 60")
	write(t, web, full[:len(full)/2]+"\n  - [") // a half-written save
	write(t, other, "apiVersion: v1\nkind: Pod\nmetadata: [\n")
	s.Step()
	select {
	case u := <-s.Updates():
		t.Fatalf("a broken save changed the set to %s", names(u.Pods))
	default:
	}
	if errs := sink.get(web); len(errs) != 1 {
		t.Fatalf("the broken save should be reported once, got %v", errs)
	}

	write(t, web, podYAML("web", "sleep 120"))
	s.Step()
	u := <-s.Updates()
	if got := names(u.Pods); got != "web-node1" || uidOf(u.Pods, "web-node1") == uid {
		t.Fatalf("after the fixed save: %s (uid changed: %v)", got, uidOf(u.Pods, "web-node1") != uid)
	}

	if err := os.Remove(web); err != nil {
		t.Fatal(err)
	}
	s.Step()
	if u := <-s.Updates(); len(u.Pods) != 0 {
		t.Fatalf("after removal: %s", names(u.Pods))
	}
}
