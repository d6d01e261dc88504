package volumes

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/minilet/minilet/internal/errdefs"
)

func writeFile(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte{'x'}, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// EmptyDirUsage counts what files take on disk, as du: a hard-linked
// file once, a sparse file by its blocks, nothing on a filesystem
// mounted inside.
func TestEmptyDirUsage(t *testing.T) {
	m, _ := newManager(t)
	ctx := context.Background()
	pod := testPod(v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))}}})
	if _, err := m.EmptyDirUsage(ctx, pod, "scratch"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("usage before Setup: %v", err)
	}
	if err := m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir, _ := m.Path(pod, &pod.Spec.Volumes[0])
	empty, err := m.EmptyDirUsage(ctx, pod, "scratch")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a"), 3<<20)
	writeFile(t, filepath.Join(dir, "sub", "b"), 1<<20)
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "sub", "a-again")); err != nil {
		t.Fatal(err)
	}
	sparse, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(100 << 20); err != nil {
		t.Fatal(err)
	}
	_ = sparse.Close()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }()
	writeFile(t, filepath.Join(mnt, "elsewhere"), 4<<20)

	used, err := m.EmptyDirUsage(ctx, pod, "scratch")
	if err != nil {
		t.Fatal(err)
	}
	grew := used - empty
	if grew < 4<<20 || grew > 4<<20+256<<10 {
		t.Errorf("usage grew by %d bytes, want about 4 MiB (3 MiB + 1 MiB, the link and the sparse file counting nothing)", grew)
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.EmptyDirUsage(canceled, pod, "scratch"); !errors.Is(err, context.Canceled) {
		t.Errorf("usage with a canceled context: %v", err)
	}
}

// With the pod's fsGroup an emptyDir belongs to that group and is
// setgid, so files created inside belong to the group too; without it
// the directory stays root's and plain 0777.
func TestEmptyDirFSGroup(t *testing.T) {
	m, _ := newManager(t)
	ctx := context.Background()
	pod := testPod(
		v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "ram", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
	)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](4321)}
	if err := m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	for i := range pod.Spec.Volumes {
		dir, _ := m.Path(pod, &pod.Spec.Volumes[i])
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSetgid == 0 || fi.Mode().Perm() != 0o777 || fi.Sys().(*syscall.Stat_t).Gid != 4321 {
			t.Errorf("%s: mode %v gid %d, want setgid 0777 and gid 4321", pod.Spec.Volumes[i].Name, fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid)
		}
		// A tmpfs root is sticky, as the kubelet's (tmpfs's own 1777).
		if sticky := fi.Mode()&os.ModeSticky != 0; sticky != (pod.Spec.Volumes[i].Name == "ram") {
			t.Errorf("%s: mode %v: sticky %v", pod.Spec.Volumes[i].Name, fi.Mode(), sticky)
		}
		writeFile(t, filepath.Join(dir, "new", "file"), 1)
		for _, p := range []string{"new", "new/file"} {
			st, err := os.Stat(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if gid := st.Sys().(*syscall.Stat_t).Gid; gid != 4321 {
				t.Errorf("%s/%s: gid %d, want the fsGroup inherited", pod.Spec.Volumes[i].Name, p, gid)
			}
		}
	}

	plain := testPod(v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	plain.UID = "uid-plain"
	if err := m.Setup(ctx, plain); err != nil {
		t.Fatal(err)
	}
	dir, _ := m.Path(plain, &plain.Spec.Volumes[0])
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSetgid != 0 || fi.Mode().Perm() != 0o777 || fi.Sys().(*syscall.Stat_t).Gid != 0 {
		t.Errorf("without fsGroup: mode %v gid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid)
	}
}
