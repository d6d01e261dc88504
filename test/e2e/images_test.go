package e2e

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/test/harness"
)

// helloArchive builds a docker-archive holding one static program that
// prints what it sees and then waits.
func helloArchive(t *testing.T, ref string) string {
	t.Helper()
	dir := t.TempDir()
	src := `package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	host, _ := os.Hostname()
	_, err := os.Stat("/etc/debian_version")
	fmt.Printf("hello from the image pid=%d greeting=%s hostfs=%v host=%s\n", os.Getpid(), os.Getenv("GREETING"), err == nil, host)
	for {
		time.Sleep(time.Hour)
	}
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the image's program: %v\n%s", err, out)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/hello", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, ggcrv1.Config{Entrypoint: []string{"/bin/hello"}, Env: []string{"GREETING=from-image-config"}})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "hello.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	return archive
}

func TestImageLoadedThroughTheCLIRunsInItsOwnRootfs(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	archive := helloArchive(t, "minilet.test/hello:1")
	out, err := a.CLI("image", "load", archive, "--root-dir", a.RootDir)
	if err != nil || !strings.Contains(out, "minilet.test/hello:1") {
		t.Fatalf("minilet image load: %v\n%s", err, out)
	}
	a.WriteManifest("img.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: img}
spec:
  containers:
  - {name: main, image: "minilet.test/hello:1", imagePullPolicy: Never}
`)
	name := a.Static("img")
	a.Eventually("img Running", func() (bool, string) {
		p, ok := a.Pod(name)
		return ok && p.Status.Phase == v1.PodRunning, describe(p, ok)
	})
	a.Eventually("the program ran as PID 1 in the image's rootfs with the image's env", func() (bool, string) {
		var s string
		err := a.Get("/containerLogs/default/"+name+"/main", &s)
		return err == nil && strings.Contains(s, "pid=1 greeting=from-image-config hostfs=false"), fmt.Sprint(s, err)
	})
	var list struct {
		Items []struct {
			ID       string   `json:"id"`
			RepoTags []string `json:"repoTags"`
			Size     int64    `json:"size"`
		} `json:"items"`
	}
	if err := a.Get("/images", &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, i := range list.Items {
		for _, tag := range i.RepoTags {
			if strings.Contains(tag, "minilet.test/hello:1") && i.Size > 0 {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("GET /images does not list the loaded image: %+v", list.Items)
	}
}

func TestMissingImageWithNeverPullWaitsWithErrImageNeverPull(t *testing.T) {
	requireRoot(t)
	a := harness.New(t)
	a.Start()
	a.WriteManifest("nope.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: nope}
spec:
  containers:
  - {name: main, image: "minilet.test/absent:1", imagePullPolicy: Never}
`)
	a.Eventually("ErrImageNeverPull", func() (bool, string) {
		p, ok := a.Pod(a.Static("nope"))
		s, _ := containerStatus(p, "main")
		return ok && s.State.Waiting != nil && s.State.Waiting.Reason == "ErrImageNeverPull", describe(p, ok)
	})
}
