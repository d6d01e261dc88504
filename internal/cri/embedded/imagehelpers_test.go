package embedded

import (
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// testImage builds an image from layer tarballs (gzip-compressed in the
// image) and a config.
func testImage(tb testing.TB, cfg v1.Config, layers ...[]byte) v1.Image {
	tb.Helper()
	img := empty.Image
	for _, l := range layers {
		data := l
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			tb.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			tb.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		tb.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", runtime.GOARCH, cfg
	cf.Created = v1.Time{Time: time.Unix(1700000000, 0)}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		tb.Fatal(err)
	}
	return img
}

// testRegistry runs an in-process registry on loopback; it returns the
// registry's host:port.
func testRegistry(tb testing.TB) string {
	tb.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	tb.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// push uploads img as ref (host:port/repo:tag) and returns the manifest
// digest.
func push(tb testing.TB, ref string, img v1.Image) v1.Hash {
	tb.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		tb.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		tb.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

func configDigest(tb testing.TB, img v1.Image) string {
	tb.Helper()
	h, err := img.ConfigName()
	if err != nil {
		tb.Fatal(err)
	}
	return h.String()
}

var (
	probeOnce sync.Once
	probeBin  []byte
	probeErr  error
)

// probeBinary builds testdata/probe as a static binary (once per test
// process) and returns its content.
func probeBinary(tb testing.TB) []byte {
	tb.Helper()
	probeOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // fallback when PATH lacks go
		}
		out, err := os.MkdirTemp("", "probe-build-")
		if err != nil {
			probeErr = err
			return
		}
		defer func() { _ = os.RemoveAll(out) }()
		cmd := exec.Command(goBin, "build", "-o", filepath.Join(out, "probe"), ".")
		cmd.Dir = filepath.Join("testdata", "probe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			probeErr = err
			tb.Logf("go build probe: %s", msg)
			return
		}
		probeBin, probeErr = os.ReadFile(filepath.Join(out, "probe"))
	})
	if probeErr != nil {
		tb.Fatalf("build the probe binary: %v", probeErr)
	}
	return probeBin
}

func remoteWriteWithBasic(ref name.Reference, img v1.Image, user, pass string) error {
	return remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: user, Password: pass}))
}
