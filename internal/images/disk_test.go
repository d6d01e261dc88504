package images

import (
	"context"
	"errors"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

type mountpointInfo struct {
	mount string
	err   error
}

func (m mountpointInfo) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	if m.err != nil {
		return nil, m.err
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: m.mount}, UsedBytes: &runtimeapi.UInt64Value{Value: 42},
	}}}, nil
}

func TestStatfsDiskUsesTheRuntimesMountpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs, err := StatfsDisk{Runtime: mountpointInfo{mount: dir}}.ImageFsStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Capacity != want.Capacity || fs.Capacity <= 0 || fs.UsedByImages != 42 {
		t.Fatalf("ImageFsStats = %+v, statfs %+v", fs, want)
	}
	if _, err := (StatfsDisk{Runtime: mountpointInfo{}}).ImageFsStats(ctx); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("no path anywhere: %v", err)
	}
	boom := errors.New("runtime down")
	if _, err := (StatfsDisk{Runtime: mountpointInfo{err: boom}, Path: dir}).ImageFsStats(ctx); !errors.Is(err, boom) {
		t.Fatalf("runtime error not wrapped: %v", err)
	}
	if _, err := Statfs(dir + "/missing"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("statfs of a missing path: %v", err)
	}
}

func TestImagesForgetsVanishedImages(t *testing.T) {
	e := newEnv(t, Config{Policy: defaultPolicy()})
	ctx := context.Background()
	e.rt.add(&fakeImage{id: "sha256:a", tags: []string{"docker.io/library/a:1"}, size: 1}, &fakeImage{id: "sha256:b", size: 2})
	e.gc.refresh(ctx)
	if got := e.gc.Images(); len(got) != 2 || got[0].RepoTags[0] != "docker.io/library/a:1" {
		t.Fatalf("Images() = %+v", got)
	}
	if err := e.rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: "sha256:a"}); err != nil { // removed behind GC's back
		t.Fatal(err)
	}
	e.gc.refresh(ctx)
	if got := e.gc.Images(); len(got) != 1 || got[0].ID != "sha256:b" {
		t.Fatalf("Images() after removal = %+v", got)
	}
}
