package conformance

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSkipListIsArgued: every entry of skip.txt has its reason above it and
// is a regexp ginkgo accepts.
func TestSkipListIsArgued(t *testing.T) {
	entries, err := readSkipList("skip.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("skip.txt has no entries")
	}
	for _, e := range entries {
		if _, err := regexp.Compile(e); err != nil {
			t.Errorf("skip entry %q: %v", e, err)
		}
	}
	re := regexp.MustCompile(strings.Join(entries, "|"))
	if !re.MatchString("[sig-node] Pods should x [Flaky] [NodeConformance]") {
		t.Errorf("skip list %q does not skip a [Flaky] spec", re)
	}
	if re.MatchString("[sig-node] Pods should get a host IP [NodeConformance] [Conformance]") {
		t.Errorf("skip list %q skips a plain [NodeConformance] spec", re)
	}
}

func TestSkipListRejectsUnarguedEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "skip.txt")
	if err := os.WriteFile(path, []byte("# reason\nA\n\nB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readSkipList(path); err == nil || !strings.Contains(err.Error(), `:4: skip entry "B" has no reason`) {
		t.Errorf("an entry without its reason: %v", err)
	}
}
