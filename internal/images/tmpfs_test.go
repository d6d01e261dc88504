package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/minilet/minilet/internal/events/eventstest"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"
)

// mountTmpfs mounts a tmpfs of the given size on a fresh directory and
// unmounts it when the test ends. It needs root (CI runs as root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "imagefs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

type fsInfo struct{ used uint64 }

func (f fsInfo) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{UsedBytes: &runtimeapi.UInt64Value{Value: f.used}}}}, nil
}

// TestGCOnARealFilesystem fills a 16 MiB tmpfs past the high threshold
// with files standing for images (a fake runtime whose RemoveImage
// deletes the file) and checks GC brings the real statfs usage down to
// the low threshold, oldest images first, sparing the one in use.
func TestGCOnARealFilesystem(t *testing.T) {
	dir := mountTmpfs(t, "16m")
	rt := newFakeRuntime()
	const mib = 1 << 20
	chunk := bytes.Repeat([]byte{0xa5}, mib)
	for i := range 14 { // 14 of 16 MiB: 87.5% used
		path := filepath.Join(dir, fmt.Sprintf("layer-%02d", i))
		if err := os.WriteFile(path, chunk, 0o600); err != nil {
			t.Fatal(err)
		}
		rt.add(&fakeImage{id: fmt.Sprintf("sha256:%02d", i), tags: []string{fmt.Sprintf("docker.io/library/img%02d:1", i)}, size: mib, path: path})
	}
	rt.run("img00:1") // the oldest by ID is in use
	disk := StatfsDisk{Runtime: fsInfo{used: 14 * mib}, Path: dir}
	before, err := disk.ImageFsStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if before.Capacity != 16*mib || before.UsedByImages != 14*mib {
		t.Fatalf("statfs of the tmpfs = %+v", before)
	}
	if u := (DiskUsage{before.Capacity, before.Available}).UsagePercent(); u < 85 {
		t.Fatalf("test setup: usage %d%% is under the high threshold", u)
	}

	rec := &eventstest.Recorder{}
	g, err := NewGC(Config{Policy: defaultPolicy()}, Deps{Images: rt, Containers: rt, Disk: disk, Recorder: rec,
		Clock: testclock.NewFakeClock(t0), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.GarbageCollect(context.Background()); err != nil {
		t.Fatalf("GarbageCollect: %v\nevents:\n%s", err, rec)
	}
	after, err := Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if u := (DiskUsage{after.Capacity, after.Available}).UsagePercent(); u > 80 {
		t.Fatalf("usage after GC is %d%%, want at most the low threshold 80%%", u)
	}
	removed := rt.removedIDs()
	if len(removed) != 2 || removed[0] != "sha256:01" || removed[1] != "sha256:02" {
		t.Fatalf("removed %v, want the two oldest unused images (01, 02)", removed)
	}
	if _, err := os.Stat(filepath.Join(dir, "layer-00")); err != nil {
		t.Fatalf("the image in use is gone: %v", err)
	}
}
