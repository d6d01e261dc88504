package layerfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/minilet/minilet/internal/cri/embedded/internal/testlayer"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (file ownership, device nodes, mounts); CI runs as root")
	}
}

// checkMerged asserts the merged view of testlayer.Stack at root.
func checkMerged(t *testing.T, root string) {
	t.Helper()
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	if got := read("etc/keep"); got != "replaced\n" {
		t.Errorf("etc/keep = %q, want the upper layer's", got)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/gone")); !os.IsNotExist(err) {
		t.Errorf("etc/gone: whiteout did not delete it (err %v)", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "opq/old")); !os.IsNotExist(err) {
		t.Errorf("opq/old: opaque dir did not hide it (err %v)", err)
	}
	if got := read("opq/new"); got != "new\n" {
		t.Errorf("opq/new = %q", got)
	}
	if l, err := os.Readlink(filepath.Join(root, "etc/link")); err != nil || l != "keep" {
		t.Errorf("etc/link -> %q, %v; want keep", l, err)
	}
	if l, err := os.Readlink(filepath.Join(root, "abs")); err != nil || l != "/etc/keep" {
		t.Errorf("abs -> %q, %v; want /etc/keep", l, err)
	}
	var a, b, s unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "data/a"), &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(root, "data/b"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("data/a and data/b are not one hard-linked file (inodes %d %d, nlink %d)", a.Ino, b.Ino, a.Nlink)
	}
	if a.Mode&0o7777 != 0o600 {
		t.Errorf("data/a mode %o, want 600", a.Mode&0o7777)
	}
	if err := unix.Stat(filepath.Join(root, "bin/suid"), &s); err != nil {
		t.Fatal(err)
	}
	if s.Mode&0o7777 != 0o4755 || s.Uid != 1000 || s.Gid != 1001 {
		t.Errorf("bin/suid mode %o owner %d:%d, want 4755 1000:1001", s.Mode&0o7777, s.Uid, s.Gid)
	}
}

func TestUnpackLayersMergedView(t *testing.T) {
	requireRoot(t)
	base, top := testlayer.Stack(t)
	tmp := t.TempDir()
	var dirs []string
	for i, l := range [][]byte{base, top} {
		d := filepath.Join(tmp, "layer"+string(rune('0'+i)))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := Unpack(d, bytes.NewReader(l)); err != nil {
			t.Fatalf("unpack layer %d: %v", i, err)
		}
		dirs = append(dirs, d)
	}
	t.Run("copy", func(t *testing.T) {
		dst := filepath.Join(tmp, "copy")
		if err := Flatten(dirs, dst); err != nil {
			t.Fatal(err)
		}
		checkMerged(t, dst)
	})
	t.Run("overlay", func(t *testing.T) {
		if !OverlaySupported(tmp) {
			t.Skip("overlayfs cannot be mounted here")
		}
		m, u, w := filepath.Join(tmp, "m"), filepath.Join(tmp, "u"), filepath.Join(tmp, "w")
		for _, d := range []string{m, u, w} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount("overlay", m, "overlay", 0, "lowerdir="+dirs[1]+":"+dirs[0]+",upperdir="+u+",workdir="+w); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = unix.Unmount(m, unix.MNT_DETACH) }()
		checkMerged(t, m)
	})
}

func TestUnpackRefusesToEscape(t *testing.T) {
	requireRoot(t)
	outside := t.TempDir()
	for name, l := range map[string][]byte{
		"through symlink": testlayer.Tar(t, testlayer.Symlink("evil", outside), testlayer.File("evil/pwned", "x", 0o644)),
		"hard link out":   testlayer.Tar(t, testlayer.Hardlink("h", "../../../../etc/passwd")),
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			if _, err := Unpack(d, bytes.NewReader(l)); err == nil {
				t.Fatal("unpack succeeded")
			}
			if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
				t.Fatal("the layer wrote outside its directory")
			}
		})
	}
	// ".." in names is cleaned to stay inside.
	d := t.TempDir()
	if _, err := Unpack(d, bytes.NewReader(testlayer.Tar(t, testlayer.File("../../x", "x", 0o644)))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "x")); err != nil {
		t.Fatalf("../../x not unpacked as /x: %v", err)
	}
}
