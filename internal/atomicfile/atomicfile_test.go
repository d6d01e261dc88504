package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFileReplacesWholeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, d := range []Durability{Durable, Volatile} {
		if err := os.WriteFile(path, []byte("old content that is longer"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(path, map[string]int{"a": 1}, 0o640, d); err != nil {
			t.Fatalf("WriteJSON(%v): %v", d, err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != `{"a":1}` {
			t.Fatalf("content = %q, %v; want the new JSON only", b, err)
		}
		fi, _ := os.Stat(path)
		if fi.Mode().Perm() != 0o640 {
			t.Errorf("mode = %v, want 0640", fi.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the target (no temporary files)", len(entries))
	}
}

func TestWriteFileMissingDirNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "f")
	err := WriteFile(path, []byte("x"), 0o600, Durable)
	if err == nil {
		t.Fatal("want an error for a missing directory")
	}
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q: want a not-exist error naming %s", err, path)
	}
}

func TestWriteJSONUnencodable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := WriteJSON(path, make(chan int), 0o600, Durable); err == nil {
		t.Fatal("want an encoding error")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a failed encode created %s", path)
	}
}
