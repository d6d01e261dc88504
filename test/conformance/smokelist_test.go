package conformance

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSmokeListIsExact: smoke.txt parses, and its focus selects each
// listed spec, as ginkgo matches it, and not one whose name merely
// contains or extends a listed one.
func TestSmokeListIsExact(t *testing.T) {
	names, err := readSmokeList("smoke.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Errorf("smoke.txt lists %d specs; the smoke set is about 20", len(names))
	}
	focus, err := regexp.Compile(smokeFocus(names))
	if err != nil {
		t.Fatalf("focus %q: %v", smokeFocus(names), err)
	}
	skip := regexp.MustCompile(strings.Join(mustSkipList(t), "|"))
	for _, n := range names {
		if !focus.MatchString("Kubernetes e2e suite " + n) {
			t.Errorf("the focus does not select %q", n)
		}
		if skip.MatchString("Kubernetes e2e suite " + n) {
			t.Errorf("smoke spec %q is skipped by skip.txt: it could never run", n)
		}
		for _, other := range []string{n + " [Slow]", "[sig-x] " + n[strings.Index(n, " ")+1:]} {
			if focus.MatchString("Kubernetes e2e suite " + other) {
				t.Errorf("the focus also selects %q", other)
			}
		}
	}
}

func mustSkipList(t *testing.T) []string {
	t.Helper()
	entries, err := readSkipList("skip.txt")
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func TestReadSmokeListRejectsMistakes(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{"# only a comment\n\n", "lists no spec"},
		{"[sig-node] A [NodeConformance]\n[It] [sig-node] B\n", `:2: "[It] [sig-node] B": write the spec's name without`},
		{"[sig-node] A\n# x\n[sig-node] A\n", `:3: spec "[sig-node] A" is listed twice`},
	} {
		path := filepath.Join(t.TempDir(), "smoke.txt")
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readSmokeList(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("readSmokeList(%q) = %v, want an error containing %q", tc.content, err, tc.want)
		}
	}
}

func TestCheckSmokeNamesWhatIsWrong(t *testing.T) {
	names := []string{"[sig-node] ok", "[sig-node] broken", "[sig-node] renamed", "[sig-node] filtered", "[sig-node] gone quiet"}
	specs := []Spec{
		{Name: "[SynchronizedBeforeSuite]", Result: Passed, Suite: true},
		{Name: "[sig-node] ok", Result: Passed},
		{Name: "[sig-node] broken", Result: Failed, Detail: "[FAILED] timed out"},
		{Name: "[sig-node] renamed to something else", Result: Passed},
		{Name: "[sig-node] filtered", Result: NotRun},
		{Name: "[sig-node] gone quiet", Result: Skipped, Detail: "Only supported for providers [gce]"},
		{Name: "[sig-node] unrelated", Result: NotRun},
	}
	got := checkSmoke(names, specs)
	want := []string{
		`smoke spec "[sig-node] broken" failed: [FAILED] timed out`,
		`smoke spec "[sig-node] renamed" is not in the suite's report`,
		`smoke spec "[sig-node] filtered" did not run`,
		`smoke spec "[sig-node] gone quiet" skipped itself: Only supported for providers [gce]`,
		`spec "[sig-node] renamed to something else" ran (passed) but is not in test/conformance/smoke.txt`,
	}
	if len(got) != len(want) {
		t.Fatalf("checkSmoke gave %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	if p := checkSmoke(names[:1], specs[:2]); len(p) != 0 {
		t.Errorf("a run of exactly the list: %q, want no problems", p)
	}
}
