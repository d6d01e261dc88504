package agent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The root dir holds the agent's keys: it ends up readable by root only,
// whether new or left 0755 by an earlier version; a shared directory such
// as /tmp is refused instead of being closed to everyone else.
func TestPrivateRootDir(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := t.TempDir()
	for _, tc := range []struct {
		name    string
		prepare func(dir string) error
		wantErr string
	}{
		{"new", func(string) error { return nil }, ""},
		{"left 0755", func(dir string) error { return os.Mkdir(dir, 0o755) }, ""},
		{"shared like tmp", func(dir string) error {
			if err := os.Mkdir(dir, 0o777); err != nil {
				return err
			}
			return os.Chmod(dir, 0o777|os.ModeSticky)
		}, "sticky bit"},
		{"a file", func(dir string) error { return os.WriteFile(dir, nil, 0o600) }, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(base, strings.ReplaceAll(tc.name, " ", "-"))
			if err := tc.prepare(dir); err != nil {
				t.Fatal(err)
			}
			err := privateRootDir(dir, log)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--root-dir") {
					t.Fatalf("err = %v, want one naming --root-dir and %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("mode = %v, %v; want 0700", fi.Mode(), err)
			}
		})
	}
}
