package objects

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Files that are not regular files or are too large are skipped and named
// (a FIFO once blocked every read of the folder; a link to /dev/zero read
// without end); the other files still serve.
func TestFolderSkipsWhatItMustNotRead(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "good.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: good}\ndata: {a: b}\n")
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "linkdir.yaml")); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "huge.yaml", "# "+strings.Repeat("x", MaxFileSize)+"\n")
	write(t, dir, "bigdata.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {a: "+strings.Repeat("x", 1<<20+1)+"}\n")
	f := NewFolder(dir)

	// A read that blocks (on the FIFO) or never ends (/dev/zero) would
	// hang here: the reads get a generous deadline, not a timing check.
	done := make(chan error, 1)
	go func() {
		cm, err := f.ConfigMap(context.Background(), "default", "good")
		if err != nil || cm.Data["a"] != "b" {
			t.Errorf("good: %+v %v", cm, err)
		}
		_, err = f.ConfigMap(context.Background(), "default", "big")
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("two reads of the folder did not end within 2 minutes: a read blocks")
	}
	for _, want := range []string{
		"pipe.yaml: not a regular file: a named pipe (FIFO)",
		"zero.yaml: not a regular file: a character device",
		"linkdir.yaml: not a regular file: a directory",
		"huge.yaml: file is 10485763 bytes, larger than the limit of 10 MiB",
		`bigdata.yaml: document 0: ConfigMap "big": data is 1048577 bytes, more than the limit of 1 MiB`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to say %q", err, want)
		}
	}
}

// One read of the folder takes in at most MaxFolderSize: the files past
// it are skipped, and named.
func TestFolderStopsAtItsTotalLimit(t *testing.T) {
	dir := t.TempDir()
	cm := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + "}\ndata: {a: " + strings.Repeat("x", 1000) + "}\n"
	}
	write(t, dir, "a.yaml", cm("a"))
	write(t, dir, "b.yaml", cm("b"))
	write(t, dir, "c.yaml", cm("c"))
	f := NewFolder(dir)
	f.maxFolder = int64(2*len(cm("a")) + 10)
	if _, err := f.ConfigMap(context.Background(), "default", "b"); err != nil {
		t.Fatalf("b is within the limit: %v", err)
	}
	_, err := f.ConfigMap(context.Background(), "default", "c")
	if err == nil || !strings.Contains(err.Error(), "c.yaml: the folder's files add up to more than 2136 bytes: this file and the ones after it are skipped") {
		t.Errorf("c past the limit: %v", err)
	}
}
