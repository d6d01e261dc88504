package podsource

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/minilet/minilet/internal/errdefs"
)

// podWithMeta is a valid pod manifest with extra metadata lines.
func podWithMeta(name, meta string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n" + meta +
		"spec:\n  containers:\n  - name: main\n    image: host\n    command: [sleep, \"60\"]\n"
}

// The API server's limits on metadata apply to pods from files and URLs,
// which reach no API server: each violation names the pod, the field and
// the limit, and repeats no more than the start of a huge value.
func TestParseManifestAppliesTheAPIServersMetadataLimits(t *testing.T) {
	for _, tc := range []struct {
		name, meta string
		want       []string
	}{
		{"300 KiB annotation", "  annotations:\n    note: " + strings.Repeat("a", 300<<10) + "\n",
			[]string{"metadata.annotations: Too long: may not be more than 262144 bytes"}},
		{"annotations over 256 KiB together", "  annotations:\n    a: " + strings.Repeat("a", 130<<10) + "\n    b: " + strings.Repeat("b", 130<<10) + "\n",
			[]string{"metadata.annotations: Too long"}},
		{"70,000-character label value", "  labels:\n    app: " + strings.Repeat("l", 70000) + "\n",
			[]string{"metadata.labels: Invalid value: \"" + strings.Repeat("l", maxShownValue) + "... (70000 characters)\"", "must be no more than 63 bytes"}},
		{"70,000-character label key", "  labels:\n    ? " + strings.Repeat("k", 70000) + "\n    : v\n",
			[]string{"metadata.labels: Invalid value: \"" + strings.Repeat("k", maxShownValue) + "... (70000 characters)\"", "must be no more than 63 bytes"}},
		{"label value syntax", "  labels:\n    app: \"-web\"\n",
			[]string{`metadata.labels: Invalid value: "-web"`}},
		{"annotation key syntax", "  annotations:\n    \"bad key\": x\n",
			[]string{`metadata.annotations: Invalid value: "bad key"`}},
		{"label key prefix syntax", "  labels:\n    Example.COM/app: web\n",
			[]string{`metadata.labels: Invalid value: "Example.COM/app"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods, err := ParseManifest([]byte(podWithMeta("web", tc.meta)), "/etc/pods/web.yaml", "file", node, time.Now())
			if err == nil {
				t.Fatalf("accepted %d pods", len(pods))
			}
			var me *ManifestError
			if !errors.As(err, &me) || !errdefs.IsInvalidArgument(err) {
				t.Fatalf("error %v: want an InvalidArgument ManifestError", err)
			}
			msg := err.Error()
			if len(msg) > 1024 {
				t.Errorf("error is %d bytes long; it should not repeat the whole value", len(msg))
			}
			for _, want := range append([]string{"/etc/pods/web.yaml", `pod "web" is invalid`}, tc.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q: want it to contain %q", msg, want)
				}
			}
		})
	}

	// A 9 MiB annotation, in JSON (as fast to refuse as YAML is slow to
	// parse under the race detector).
	huge := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","annotations":{"note":"` + strings.Repeat("a", 9<<20) +
		`"}},"spec":{"containers":[{"name":"main","image":"host"}]}}`
	_, err := ParseManifest([]byte(huge), "/etc/pods/web.json", "file", node, time.Now())
	if want := `manifest /etc/pods/web.json: pod "web" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes`; err == nil || err.Error() != want {
		t.Errorf("9 MiB annotation: %v; want %q", err, want)
	}

	// The static pod's own annotations (config.source, .hash, .seen) count
	// too: they are on the mirror pod the API server would check.
	full := podWithMeta("web", "  annotations:\n    note: "+strings.Repeat("a", 256<<10-len("note"))+"\n")
	if _, err := ParseManifest([]byte(full), "/etc/pods/web.yaml", "file", node, time.Now()); err == nil ||
		!strings.Contains(err.Error(), `pod "web-node1" is invalid: metadata.annotations: Too long`) {
		t.Errorf("256 KiB of annotations plus the static pod's: %v", err)
	}

	// Right at the limits is fine, as in the API server.
	ok := podWithMeta("web", "  labels:\n    "+strings.Repeat("k", 63)+": "+strings.Repeat("v", 63)+
		"\n    example.com/app: web\n  annotations:\n    note: "+strings.Repeat("a", 200<<10)+"\n")
	if pods, err := ParseManifest([]byte(ok), "/etc/pods/web.yaml", "file", node, time.Now()); err != nil || len(pods) != 1 {
		t.Fatalf("a pod within the limits: %d pods, %v", len(pods), err)
	}
}

// The file source reports such a pod as it reports any invalid manifest
// (once, through OnError, which the agent turns into an InvalidManifest
// Event and a log line) and runs the other files' pods.
func TestFileSourceRefusesAPodOverTheMetadataLimits(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	write(t, filepath.Join(dir, "good.yaml"), podYAML("good", "sleep 60"))
	write(t, bad, podWithMeta("bad", "  annotations:\n    note: "+strings.Repeat("a", 300<<10)+"\n"))
	var sink errSink
	s, err := NewFile(FileConfig{NodeName: node, Path: dir, Clock: clocktesting.NewFakeClock(time.Now()),
		Logger: testLogger(t), OnError: sink.on})
	if err != nil {
		t.Fatal(err)
	}
	s.Step()
	if got := names((<-s.Updates()).Pods); got != "good-node1" {
		t.Fatalf("pods [%s]; want only good-node1", got)
	}
	errs := sink.get(bad)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `pod "bad" is invalid: metadata.annotations: Too long`) {
		t.Fatalf("want the bad file reported once, got %v", errs)
	}
}
