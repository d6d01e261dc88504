package remote_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestImageGCCalls covers what image GC needs from containerd: the image
// filesystem's usage, the image list with sizes, and removing an image.
// The image is one of the test's own, with content no other image has
// (containerd's RemoveImage drops every name of the removed image's ID).
func TestImageGCCalls(t *testing.T) {
	ep := endpoint(t)
	ctx := context.Background()
	rt := connect(t, ep)
	name := fmt.Sprintf("minilet.test/gc-%d-%d:latest", os.Getpid(), time.Now().UnixNano())
	importImage(t, ep, name)
	t.Cleanup(func() { _ = rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: name}) })

	fs, err := rt.ImageFsInfo(ctx)
	if err != nil || len(fs.GetImageFilesystems()) == 0 {
		t.Fatalf("ImageFsInfo = %v, %v; want the image filesystem", fs, err)
	}
	if u := fs.GetImageFilesystems()[0]; u.GetUsedBytes().GetValue() == 0 || u.GetFsId().GetMountpoint() == "" {
		t.Errorf("image filesystem usage %v: want used bytes and a mountpoint", u)
	}

	var st *runtimeapi.ImageStatusResponse
	waitUntil(t, "the imported image in ImageStatus", func() (bool, string) {
		st, err = rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: name}, false)
		return err == nil && st.GetImage() != nil, fmt.Sprint(st, err)
	})
	if st.GetImage().GetSize() == 0 || !contains(st.GetImage().GetRepoTags(), name) {
		t.Errorf("image status %v: want a size and the tag %s", st.GetImage(), name)
	}
	list, err := rt.ListImages(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, img := range list {
		found = found || img.GetId() == st.GetImage().GetId()
	}
	if !found {
		t.Errorf("ListImages does not list %s (%s)", name, st.GetImage().GetId())
	}

	if err := rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: st.GetImage().GetId()}); err != nil {
		t.Fatalf("RemoveImage: %v", err)
	}
	st, err = rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: name}, false)
	if err != nil || st.GetImage() != nil {
		t.Errorf("after RemoveImage: ImageStatus = %v, %v; want no image", st.GetImage(), err)
	}
	if err := rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: name}); err != nil {
		t.Errorf("removing a removed image: %v (want idempotent)", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// importImage builds a one-layer docker archive holding a file unique to
// this call and imports it as name with ctr.
func importImage(t *testing.T, ep, name string) {
	t.Helper()
	layer := tarOf(t, map[string]string{"unique": name + time.Now().String()})
	diff := sha256.Sum256(layer)
	cfg, _ := json.Marshal(map[string]any{
		"architecture": goruntime.GOARCH, "os": "linux",
		"config": map[string]any{"Cmd": []string{"/unique"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
	})
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{name}, "Layers": []string{"layer.tar"}}})
	archive := tarOf(t, map[string]string{"manifest.json": string(manifest), cfgName: string(cfg), "layer.tar": string(layer)})
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ctr", "--address", strings.TrimPrefix(ep, "unix://"), "-n", "k8s.io", "images", "import", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
}

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
