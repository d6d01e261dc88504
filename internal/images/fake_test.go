package images

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// fakeImage is one image in fakeRuntime; path, when set, is a file that
// stands for the image's bytes on a real filesystem.
type fakeImage struct {
	id     string
	tags   []string
	size   int64
	pinned bool
	path   string
}

// fakeRuntime stands in for the CRI image and runtime services: the
// embedded runtime's real image store is another package's work and is
// exercised by its own tests; here we test GC's decisions and what it
// asks the runtime to do.
type fakeRuntime struct {
	mu         sync.Mutex
	images     map[string]*fakeImage
	containers []*runtimeapi.Container
	removed    []string
	removeErr  map[string]error
	listErr    error
	capacity   int64 // for Disk when no files back the images
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{images: map[string]*fakeImage{}, removeErr: map[string]error{}}
}

func (f *fakeRuntime) add(imgs ...*fakeImage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range imgs {
		f.images[i.id] = i
	}
}

func (f *fakeRuntime) run(image string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers = append(f.containers, &runtimeapi.Container{
		Id: fmt.Sprintf("c%d", len(f.containers)), Image: &runtimeapi.ImageSpec{Image: image}, ImageRef: image,
		State: runtimeapi.ContainerState_CONTAINER_EXITED,
	})
}

func (f *fakeRuntime) ListImages(ctx context.Context, _ *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	out := []*runtimeapi.Image{}
	for _, i := range f.images {
		out = append(out, &runtimeapi.Image{Id: i.id, RepoTags: i.tags, Size: uint64(i.size), Pinned: i.pinned})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Id < out[b].Id })
	return out, nil
}

func (f *fakeRuntime) RemoveImage(ctx context.Context, spec *runtimeapi.ImageSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.removeErr[spec.GetImage()]; err != nil {
		return err
	}
	i, ok := f.images[spec.GetImage()]
	if !ok {
		return fmt.Errorf("image %s: %w", spec.GetImage(), errdefs.ErrNotFound)
	}
	if i.path != "" {
		if err := os.Remove(i.path); err != nil {
			return err
		}
	}
	delete(f.images, i.id)
	f.removed = append(f.removed, i.id)
	return nil
}

func (f *fakeRuntime) ListContainers(ctx context.Context, _ *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*runtimeapi.Container(nil), f.containers...), nil
}

// ImageFsStats computes the disk as capacity minus the images' sizes.
func (f *fakeRuntime) ImageFsStats(ctx context.Context) (FsStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var used int64
	for _, i := range f.images {
		used += i.size
	}
	return FsStats{Capacity: f.capacity, Available: f.capacity - used, UsedByImages: used}, nil
}

func (f *fakeRuntime) removedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.removed...)
}

func (f *fakeRuntime) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.images[id]
	return ok
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
