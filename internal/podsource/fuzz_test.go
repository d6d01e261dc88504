package podsource

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podspec"
)

// FuzzParseManifest feeds the manifest decode path arbitrary bytes. It must
// never panic; it either refuses the input with a ManifestError
// (InvalidArgument) or returns pods that are named, identified and valid as
// the sources promise, the same pods each time. Under plain `go test` it
// runs its seeds (the examples and the shapes below); `go test -fuzz
// FuzzParseManifest ./internal/podsource/` explores from them.
func FuzzParseManifest(f *testing.F) {
	examples, _ := filepath.Glob(filepath.Join("..", "..", "examples", "pods", "*.yaml"))
	for _, path := range examples {
		if data, err := os.ReadFile(path); err == nil {
			f.Add(data)
		}
	}
	for _, seed := range []string{
		podYAML("web", "sleep 60"),
		podJSON("web"),
		podList,
		podYAML("a", "true") + "---\n# a comment\n---\n" + podYAML("b", "true"),
		`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"List","items":[]}]}`,
		podWithMeta("meta", "  namespace: prod\n  labels: {app: web, example.com/tier: front}\n  annotations: {note: hello}\n"),
		podWithMeta("bad", "  labels: {app: \"-x\"}\n"),
		"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: host, ports: [{containerPort: 80}]}]}\n",
		"apiVersion: v1\nkind: Pod\nmetadata: [\n",
		"kind: Pod\napiVersion: v1\nmetadata: {name: a, name: b}\n",
		"",
		"null",
	} {
		f.Add([]byte(seed))
	}
	seen := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := ParseManifest(data, "/etc/pods/fuzz.yaml", podspec.SourceFile, node, seen)
		if err != nil {
			var me *ManifestError
			if !errors.As(err, &me) || me.Path != "/etc/pods/fuzz.yaml" || !errdefs.IsInvalidArgument(err) {
				t.Fatalf("error %v (%T): want an InvalidArgument ManifestError for the file", err, err)
			}
			if pods != nil {
				t.Fatalf("an error and %d pods", len(pods))
			}
			return
		}
		for _, pod := range pods {
			if !strings.HasSuffix(pod.Name, "-node1") || pod.Namespace == "" || pod.UID == "" {
				t.Fatalf("pod %q in %q, UID %q: not named and identified as a static pod", pod.Name, pod.Namespace, pod.UID)
			}
			if pod.Annotations[podspec.AnnotationConfigSource] != podspec.SourceFile {
				t.Fatalf("pod %q: config source %q", pod.Name, pod.Annotations[podspec.AnnotationConfigSource])
			}
			if errs := append(podspec.Validate(pod), validateMetadata(pod)...); len(errs) > 0 {
				t.Fatalf("pod %q was returned but is invalid: %v", pod.Name, errs.ToAggregate())
			}
		}
		again, err := ParseManifest(data, "/etc/pods/fuzz.yaml", podspec.SourceFile, node, seen)
		if err != nil || len(again) != len(pods) {
			t.Fatalf("a second parse gave %d pods, %v; the first %d", len(again), err, len(pods))
		}
		for i := range pods {
			if again[i].UID != pods[i].UID {
				t.Fatalf("pod %q: UID %s then %s for the same bytes", pods[i].Name, pods[i].UID, again[i].UID)
			}
		}
	})
}
