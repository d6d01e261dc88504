package volumes

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// With an fsGroup, a read-only volume's files belong to the group and are
// group-readable whatever their mode, so a non-root container process
// that has the group reads a 0400 secret, as on the kubelet; another user
// without the group still cannot.
func TestFSGroupMakesVolumeFilesReadableByTheGroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to chown and to run as another user")
	}
	// Not t.TempDir: its parent is closed to other users.
	dir, err := os.MkdirTemp("", "fsgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(dir, "vol")
	if _, err := writeAtomic(vol, map[string]File{"data-1": {Data: []byte("value-1"), Mode: 0o400}}, 1001); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(vol, "data-1"))
	if err != nil {
		t.Fatal(err)
	}
	if gid := st.Sys().(*syscall.Stat_t).Gid; gid != 1001 || st.Mode().Perm() != 0o440 {
		t.Fatalf("data-1: group %d mode %v, want group 1001 mode 0440", gid, st.Mode().Perm())
	}
	read := func(groups ...uint32) error {
		cmd := exec.Command("cat", filepath.Join(vol, "data-1"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: groups}}
		return cmd.Run()
	}
	if err := read(1001); err != nil {
		t.Errorf("uid 1000 with group 1001 cannot read the file: %v", err)
	}
	if err := read(); err == nil {
		t.Error("uid 1000 without the group reads a 0440 file of group 1001")
	}
}
