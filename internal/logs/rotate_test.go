package logs

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// logDir makes <root>/<pod dir>/<container> and returns the path of its
// current log file, 0.log.
func logDir(t testing.TB, root, pod, ctr string) string {
	t.Helper()
	dir := filepath.Join(root, pod, ctr)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "0.log")
}

// names lists the files of dir, sorted.
func names(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return string(data)
}

// recreate is a reopen that, as a runtime does, starts a new empty file.
func recreate(path string) func() error {
	return func() error { return os.WriteFile(path, nil, 0o640) }
}

func TestRotateFileBelowTheLimitLeavesItAlone(t *testing.T) {
	path := logDir(t, t.TempDir(), "ns_p_uid", "c")
	appendTo(t, path, strings.Repeat("x", 99))
	reopened := false
	rotated, err := Policy{MaxSize: 100, MaxFiles: 3}.RotateFile(path, t0, func() error { reopened = true; return nil })
	if err != nil || rotated || reopened {
		t.Fatalf("RotateFile = %v, %v (reopened %v); want nothing done", rotated, err, reopened)
	}
	if got := names(t, filepath.Dir(path)); len(got) != 1 {
		t.Fatalf("files %v", got)
	}
}

// Successive rotations keep MaxFiles files: the current one, the newest
// rotated one as it was, and older ones compressed; the oldest go. Every
// kept file holds exactly what was written to it.
func TestRotateFileKeepsMaxFilesNewestUncompressed(t *testing.T) {
	path := logDir(t, t.TempDir(), "ns_p_uid", "c")
	p := Policy{MaxSize: 10, MaxFiles: 4}
	stamp := func(i int) string { return t0.Add(time.Duration(i) * time.Minute).Format(RotationTimeFormat) }
	for i := range 6 {
		appendTo(t, path, strings.Repeat(string(rune('a'+i)), 10))
		rotated, err := p.RotateFile(path, t0.Add(time.Duration(i)*time.Minute), recreate(path))
		if err != nil || !rotated {
			t.Fatalf("rotation %d: %v, %v", i, rotated, err)
		}
	}
	appendTo(t, path, "current")
	want := []string{"0.log", "0.log." + stamp(3) + ".gz", "0.log." + stamp(4) + ".gz", "0.log." + stamp(5)}
	dir := filepath.Dir(path)
	if got := names(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", got, want)
	}
	for i, w := range []string{"current", "dddddddddd", "eeeeeeeeee", "ffffffffff"} {
		if got := mustRead(t, filepath.Join(dir, want[i])); got != w {
			t.Errorf("%s holds %q, want %q", want[i], got, w)
		}
	}
}

func TestRotateFileTwiceInOneSecondWaits(t *testing.T) {
	path := logDir(t, t.TempDir(), "ns_p_uid", "c")
	p := Policy{MaxSize: 1, MaxFiles: 5}
	appendTo(t, path, "one")
	if ok, err := p.RotateFile(path, t0, recreate(path)); !ok || err != nil {
		t.Fatalf("first rotation: %v %v", ok, err)
	}
	appendTo(t, path, "two")
	if ok, err := p.RotateFile(path, t0.Add(500*time.Millisecond), recreate(path)); ok || err != nil {
		t.Fatalf("second rotation in the same second: %v %v, want it left for later", ok, err)
	}
	if got := mustRead(t, path+"."+t0.Format(RotationTimeFormat)); got != "one" {
		t.Fatalf("rotated file overwritten: %q", got)
	}
}

func TestRotateFileRenamesBackWhenReopenFails(t *testing.T) {
	path := logDir(t, t.TempDir(), "ns_p_uid", "c")
	appendTo(t, path, "content")
	boom := errors.New("container is not running")
	rotated, err := Policy{MaxSize: 1, MaxFiles: 2}.RotateFile(path, t0, func() error { return boom })
	if rotated || !errors.Is(err, boom) {
		t.Fatalf("RotateFile = %v, %v; want the reopen error", rotated, err)
	}
	if got := names(t, filepath.Dir(path)); len(got) != 1 || mustRead(t, path) != "content" {
		t.Fatalf("files %v; want 0.log back with its content", got)
	}
}

// A writer that made its new file before failing keeps it: renaming the
// old one back would throw away what it wrote since.
func TestRotateFileKeepsTheWritersNewFileWhenReopenFails(t *testing.T) {
	path := logDir(t, t.TempDir(), "ns_p_uid", "c")
	appendTo(t, path, "old")
	_, err := Policy{MaxSize: 1, MaxFiles: 2}.RotateFile(path, t0, func() error {
		appendTo(t, path, "new")
		return errors.New("late failure")
	})
	if err == nil {
		t.Fatal("want the reopen error")
	}
	if mustRead(t, path) != "new" || mustRead(t, path+"."+t0.Format(RotationTimeFormat)) != "old" {
		t.Fatalf("files %v", names(t, filepath.Dir(path)))
	}
}

func TestRotateFileMissingIsNotExist(t *testing.T) {
	path := logDir(t, t.TempDir(), "ns_p_uid", "c")
	if _, err := (Policy{MaxSize: 1, MaxFiles: 2}).RotateFile(path, t0, recreate(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want os.ErrNotExist", err)
	}
}

// What a crash in the middle of a compression leaves is tidied up at the
// next rotation: the .tmp goes, and so does an original whose archive was
// complete.
func TestRotateFileTidiesInterruptedCompression(t *testing.T) {
	path := logDir(t, t.TempDir(), "ns_p_uid", "c")
	dir := filepath.Dir(path)
	s1, s2 := t0.Format(RotationTimeFormat), t0.Add(time.Minute).Format(RotationTimeFormat)
	appendTo(t, path+"."+s1, "first")
	if err := compressFile(path + "." + s1); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path+"."+s1, "first") // the original was not removed yet
	appendTo(t, path+"."+s2, "second")
	appendTo(t, path+"."+s2+".gz.tmp", "half an archive")
	appendTo(t, filepath.Join(dir, "1.log.20261122-050000"), "another attempt's: not ours")
	appendTo(t, path, "current")
	if ok, err := (Policy{MaxSize: 1, MaxFiles: 4}).RotateFile(path, t0.Add(2*time.Minute), recreate(path)); !ok || err != nil {
		t.Fatalf("RotateFile: %v %v", ok, err)
	}
	s3 := t0.Add(2 * time.Minute).Format(RotationTimeFormat)
	want := []string{"0.log", "0.log." + s1 + ".gz", "0.log." + s2 + ".gz", "0.log." + s3, "1.log.20261122-050000"}
	if got := names(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", got, want)
	}
	if mustRead(t, path+"."+s1+".gz") != "first" || mustRead(t, path+"."+s2+".gz") != "second" || mustRead(t, path+"."+s3) != "current" {
		t.Fatal("contents changed")
	}
}

func TestRemoveOrphanedRotations(t *testing.T) {
	root := t.TempDir()
	live := logDir(t, root, "ns_a_1", "c")
	gone := logDir(t, root, "ns_a_1", "old")
	s := "." + t0.Format(RotationTimeFormat)
	for _, f := range []string{live + s, live + s + ".gz", gone + s, gone + s + ".gz", gone + s + ".gz.tmp", gone} {
		appendTo(t, f, "x")
	}
	// Not rotated files: left alone whoever they belong to.
	other := filepath.Join(filepath.Dir(gone), "notes.txt")
	appendTo(t, other, "x")
	n, err := RemoveOrphanedRotations(root, map[string]bool{live: true})
	if err != nil || n != 3 {
		t.Fatalf("RemoveOrphanedRotations = %d, %v; want 3 removed", n, err)
	}
	if got := names(t, filepath.Dir(live)); strings.Join(got, " ") != "0.log.20261122-050000 0.log.20261122-050000.gz" {
		t.Errorf("live container's files %v", got)
	}
	if got := names(t, filepath.Dir(gone)); strings.Join(got, " ") != "0.log notes.txt" {
		t.Errorf("removed container's files %v", got)
	}
	if n, err := RemoveOrphanedRotations(filepath.Join(root, "missing"), nil); n != 0 || err != nil {
		t.Errorf("missing root: %d %v", n, err)
	}
}

func BenchmarkRotateFile10MiB(b *testing.B) {
	path := logDir(b, b.TempDir(), "ns_p_uid", "c")
	var sb strings.Builder
	for i := 0; sb.Len() < 10<<20; i++ {
		sb.WriteString(line(i, Stdout, "F", "some log line of moderate length for the benchmark"))
	}
	content := []byte(sb.String())
	p := Policy{MaxSize: 10 << 20, MaxFiles: 3}
	b.SetBytes(int64(len(content)))
	now := t0
	for b.Loop() {
		// Each rotation compresses the one before.
		if err := os.WriteFile(path, content, 0o640); err != nil {
			b.Fatal(err)
		}
		now = now.Add(time.Second)
		if ok, err := p.RotateFile(path, now, func() error { return nil }); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
