package embedded

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minilet/minilet/internal/cri/embedded/internal/testlayer"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func imageStatus(t *testing.T, r *Runtime, ref string) *runtimeapi.Image {
	t.Helper()
	resp, err := r.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: ref}, false)
	if err != nil {
		t.Fatalf("ImageStatus(%q): %v", ref, err)
	}
	return resp.GetImage()
}

func TestPullByTagAndDigestThenRemove(t *testing.T) {
	requireRoot(t)
	reg := testRegistry(t)
	base, top := testlayer.Stack(t)
	img := testImage(t, v1.Config{Cmd: []string{"/bin/true"}}, base, top)
	dig := push(t, reg+"/test/app:v1", img)
	id := configDigest(t, img)

	r := newTestRuntime(t, t.TempDir())
	ctx := context.Background()
	got, err := r.PullImage(ctx, &runtimeapi.ImageSpec{Image: reg + "/test/app:v1"}, nil, nil)
	if err != nil {
		t.Fatalf("PullImage by tag: %v", err)
	}
	if got != id {
		t.Fatalf("PullImage = %s, want the config digest %s", got, id)
	}
	for _, ref := range []string{reg + "/test/app:v1", reg + "/test/app@" + dig.String(), id, strings.TrimPrefix(id, "sha256:")[:12]} {
		st := imageStatus(t, r, ref)
		if st == nil || st.Id != id {
			t.Fatalf("ImageStatus(%q) = %v, want image %s", ref, st, id)
		}
	}
	st := imageStatus(t, r, id)
	if len(st.RepoTags) != 1 || st.RepoTags[0] != reg+"/test/app:v1" || len(st.RepoDigests) != 1 || st.RepoDigests[0] != reg+"/test/app@"+dig.String() {
		t.Fatalf("tags %v digests %v", st.RepoTags, st.RepoDigests)
	}
	if st.Size < uint64(len("replaced\nnew\nshared\n")) {
		t.Fatalf("size %d too small", st.Size)
	}
	if imageStatus(t, r, reg+"/test/app:v2") != nil {
		t.Fatal("ImageStatus of an unknown tag returned an image")
	}
	// By digest, as a second reference to the same image.
	if got, err := r.PullImage(ctx, &runtimeapi.ImageSpec{Image: reg + "/test/app@" + dig.String()}, nil, nil); err != nil || got != id {
		t.Fatalf("PullImage by digest = %s, %v", got, err)
	}
	list, err := r.ListImages(ctx, nil)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListImages = %v, %v; want host and the image", list, err)
	}
	fs, err := r.ImageFsInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := fs.ImageFilesystems[0].UsedBytes.Value; used < st.Size {
		t.Fatalf("ImageFsInfo used %d < image size %d", used, st.Size)
	}
	stats, err := r.ImageFilesystemStats(ctx)
	if err != nil || stats.CapacityBytes == 0 || stats.AvailableBytes > stats.CapacityBytes || stats.InodesTotal == 0 {
		t.Fatalf("ImageFilesystemStats = %+v, %v", stats, err)
	}

	if err := r.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: reg + "/test/app:v1"}); err != nil {
		t.Fatalf("RemoveImage: %v", err)
	}
	if imageStatus(t, r, id) != nil {
		t.Fatal("image still present after RemoveImage")
	}
	if err := r.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: id}); err != nil {
		t.Fatalf("RemoveImage of a removed image: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(r.images.Root(), "layers"))
	if len(entries) != 0 {
		t.Fatalf("layers left after RemoveImage: %v", entries)
	}
	fs, _ = r.ImageFsInfo(ctx)
	if used := fs.ImageFilesystems[0].UsedBytes.Value; used != 0 {
		t.Fatalf("ImageFsInfo used %d after removing every image", used)
	}
	if err := r.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: "host"}); err == nil {
		t.Fatal("RemoveImage(host) succeeded")
	}
	if _, err := r.PullImage(ctx, &runtimeapi.ImageSpec{Image: reg + "/test/missing:v1"}, nil, nil); err == nil {
		t.Fatal("pulling a missing image succeeded")
	}
}

// An image repeating a layer (as empty layers often are) runs.
func TestImageWithRepeatedLayer(t *testing.T) {
	requireRoot(t)
	r := newTestRuntime(t, t.TempDir())
	bin := probeBinary(t)
	empty := testlayer.Tar(t)
	img := testImage(t, v1.Config{Entrypoint: []string{"/probe", "echo", "ok"}}, empty, testlayer.Tar(t, testlayer.Entry{Name: "probe", Body: string(bin), Mode: 0o755}), empty)
	tag, _ := name.NewTag("example.com/repeat:1")
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadArchive(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	sb, _ := testSandbox(t, r)
	st, lines := runToExit(t, r, sb, imageContainerConfig("rep", "example.com/repeat:1", nil, nil))
	if st.ExitCode != 0 || len(lines) != 1 || lines[0] != "stdout ok" {
		t.Fatalf("exit %d (%s), log %q", st.ExitCode, st.Message, lines)
	}
}

func TestPullCredentials(t *testing.T) {
	requireRoot(t)
	inner := registry.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://")
	img := testImage(t, v1.Config{}, testlayer.Tar(t, testlayer.File("f", "x", 0o644)))
	ref, err := name.ParseReference(reg+"/secure/app:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remoteWriteWithBasic(ref, img, "alice", "s3cret"); err != nil {
		t.Fatal(err)
	}

	root := t.TempDir()
	r := newTestRuntime(t, root)
	ctx := context.Background()
	spec := &runtimeapi.ImageSpec{Image: reg + "/secure/app:v1"}
	if _, err := r.PullImage(ctx, spec, nil, nil); err == nil {
		t.Fatal("pull without credentials succeeded")
	}
	if _, err := r.PullImage(ctx, spec, &runtimeapi.AuthConfig{Username: "alice", Password: "wrong"}, nil); err == nil {
		t.Fatal("pull with wrong credentials succeeded")
	}
	if _, err := r.PullImage(ctx, spec, &runtimeapi.AuthConfig{Username: "alice", Password: "s3cret"}, nil); err != nil {
		t.Fatalf("pull with request credentials: %v", err)
	}
	if err := r.RemoveImage(ctx, spec); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"auths": map[string]any{"http://" + reg + "/v2/": map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte("alice:s3cret")),
	}}}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(root, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.PullImage(ctx, spec, nil, nil); err != nil {
		t.Fatalf("pull with docker config credentials: %v", err)
	}
}

func TestLoadArchives(t *testing.T) {
	requireRoot(t)
	img := testImage(t, v1.Config{Entrypoint: []string{"/x"}}, testlayer.Tar(t, testlayer.File("x", "x", 0o755)))
	id := configDigest(t, img)
	ctx := context.Background()

	t.Run("docker-archive", func(t *testing.T) {
		r := newTestRuntime(t, t.TempDir())
		tag, err := name.NewTag("example.com/team/app:1.0")
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := tarball.Write(tag, img, &buf); err != nil {
			t.Fatal(err)
		}
		loaded, err := r.LoadArchive(ctx, &buf)
		if err != nil {
			t.Fatalf("LoadArchive: %v", err)
		}
		if len(loaded) != 1 || loaded[0].ID != id || len(loaded[0].RepoTags) != 1 || loaded[0].RepoTags[0] != "example.com/team/app:1.0" {
			t.Fatalf("loaded %+v, want %s tagged example.com/team/app:1.0", loaded, id)
		}
		if st := imageStatus(t, r, "example.com/team/app:1.0"); st == nil || st.Id != id {
			t.Fatalf("ImageStatus after load = %v", st)
		}
	})
	t.Run("oci-layout", func(t *testing.T) {
		r := newTestRuntime(t, t.TempDir())
		dir := t.TempDir()
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "busybox:1.36"})); err != nil {
			t.Fatal(err)
		}
		loaded, err := r.LoadArchive(ctx, bytes.NewReader(tarDir(t, dir)))
		if err != nil {
			t.Fatalf("LoadArchive: %v", err)
		}
		if len(loaded) != 1 || loaded[0].ID != id || loaded[0].RepoTags[0] != "docker.io/library/busybox:1.36" {
			t.Fatalf("loaded %+v", loaded)
		}
		if st := imageStatus(t, r, "busybox:1.36"); st == nil || st.Id != id {
			t.Fatalf("ImageStatus(busybox:1.36) = %v", st)
		}
	})
	t.Run("symlink escape", func(t *testing.T) {
		r := newTestRuntime(t, t.TempDir())
		outside := t.TempDir()
		evil := testlayer.Tar(t, testlayer.Symlink("a", outside), testlayer.File("a/manifest.json", "[]", 0o644))
		if _, err := r.LoadArchive(ctx, bytes.NewReader(evil)); err == nil {
			t.Fatal("an archive writing through its own symlink was loaded")
		}
		if _, err := os.Stat(filepath.Join(outside, "manifest.json")); err == nil {
			t.Fatal("the archive wrote outside the store")
		}
	})
	t.Run("garbage", func(t *testing.T) {
		r := newTestRuntime(t, t.TempDir())
		if _, err := r.LoadArchive(ctx, strings.NewReader("not a tar")); err == nil {
			t.Fatal("loading garbage succeeded")
		}
	})
}

func TestImageStoreSurvivesRestartAndQuarantinesCorruptRecords(t *testing.T) {
	requireRoot(t)
	reg := testRegistry(t)
	imgA := testImage(t, v1.Config{}, testlayer.Tar(t, testlayer.File("a", "a", 0o644)))
	imgB := testImage(t, v1.Config{}, testlayer.Tar(t, testlayer.File("b", "b", 0o644)))
	push(t, reg+"/r/a:1", imgA)
	push(t, reg+"/r/b:1", imgB)
	root := t.TempDir()
	r := newTestRuntime(t, root)
	ctx := context.Background()
	for _, ref := range []string{reg + "/r/a:1", reg + "/r/b:1"} {
		if _, err := r.PullImage(ctx, &runtimeapi.ImageSpec{Image: ref}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	_ = r.Close(ctx)
	idB := configDigest(t, imgB)
	if err := os.WriteFile(imageMetaPath(r, idB), []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	r2 := newTestRuntime(t, root)
	if st := imageStatus(t, r2, reg+"/r/a:1"); st == nil || st.Id != configDigest(t, imgA) {
		t.Fatalf("image a after restart: %v", st)
	}
	if st := imageStatus(t, r2, idB); st != nil {
		t.Fatalf("corrupt image b still listed: %v", st)
	}
	matches, _ := filepath.Glob(imageMetaPath(r2, idB) + ".corrupt-*")
	if len(matches) != 1 {
		t.Fatalf("corrupt record not moved aside: %v", matches)
	}
	// A configured pinned reference marks the image pinned.
	pinned, err := New(Config{RootDir: t.TempDir(), Logger: testLogger(t), PinnedImages: []string{reg + "/r/a:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pinned.Close(ctx) }()
	if _, err := pinned.PullImage(ctx, &runtimeapi.ImageSpec{Image: reg + "/r/a:1"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if st := imageStatus(t, pinned, reg+"/r/a:1"); st == nil || !st.Pinned {
		t.Fatalf("configured pinned image not reported pinned: %v", st)
	}
}

// imageMetaPath is where the store keeps the record of image id.
func imageMetaPath(r *Runtime, id string) string {
	return filepath.Join(r.images.Root(), "meta", strings.TrimPrefix(id, "sha256:")+".json")
}

// tarDir archives dir's regular files and directories.
func tarDir(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = rel
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
