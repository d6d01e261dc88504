// Package testlayer builds image layer tarballs for the embedded runtime's
// tests (layer unpacking, the image store, containers from images). It is
// imported by tests only.
package testlayer

import (
	"archive/tar"
	"bytes"
	"testing"
	"time"
)

// Entry is one entry of a test layer.
type Entry struct {
	Name     string
	Type     byte // tar.TypeReg when zero
	Body     string
	Mode     int64
	UID, GID int
	Link     string
}

// File is a regular file entry.
func File(name, body string, mode int64) Entry {
	return Entry{Name: name, Type: tar.TypeReg, Body: body, Mode: mode}
}

// Dir is a directory entry.
func Dir(name string, mode int64) Entry { return Entry{Name: name, Type: tar.TypeDir, Mode: mode} }

// Symlink is a symbolic link entry.
func Symlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Link: target, Mode: 0o777}
}

// Hardlink is a hard link entry.
func Hardlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeLink, Link: target}
}

// Tar builds an uncompressed layer tarball.
func Tar(tb testing.TB, entries ...Entry) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.Name, Typeflag: typ, Mode: e.Mode, Uid: e.UID, Gid: e.GID, Linkname: e.Link, ModTime: mtime, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// Stack is two layers exercising whiteouts, opaque dirs, links and
// metadata: base, and top to be stacked on it.
func Stack(tb testing.TB) (base, top []byte) {
	base = Tar(tb,
		Dir("etc/", 0o755),
		File("etc/keep", "keep\n", 0o644),
		File("etc/gone", "gone\n", 0o644),
		Dir("opq/", 0o755),
		File("opq/old", "old\n", 0o644),
		Entry{Name: "bin/suid", Type: tar.TypeReg, Body: "x", Mode: 0o4755, UID: 1000, GID: 1001},
		File("data/a", "shared\n", 0o600),
		Hardlink("data/b", "data/a"),
		Symlink("etc/link", "keep"),
		Symlink("abs", "/etc/keep"),
	)
	top = Tar(tb,
		File("etc/.wh.gone", "", 0o644),
		File("opq/.wh..wh..opq", "", 0o644),
		File("opq/new", "new\n", 0o640),
		File("etc/keep", "replaced\n", 0o644),
	)
	return base, top
}
