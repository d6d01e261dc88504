package imagereg_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/minilet/minilet/test/conformance/imagereg"
)

// agnhostEnv names the static agnhost binary the agnhost image is made
// of (build it with `go build k8s.io/kubernetes/test/images/agnhost` in a
// module with hack/cluster's requirements). Without it the tests use a
// stand-in script, and those that run agnhost itself skip.
const agnhostEnv = "MINILET_AGNHOST"

var shared struct {
	once     sync.Once
	reg      *imagereg.Registry
	dir      string
	agnhost  string
	realAgn  bool
	startErr error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.reg != nil {
		_ = shared.reg.Close()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// agnhostBinary is MINILET_AGNHOST, or a stand-in script written in dir.
func agnhostBinary(dir string) (path string, real bool, err error) {
	if p := os.Getenv(agnhostEnv); p != "" {
		return p, true, nil
	}
	p := filepath.Join(dir, "agnhost-stand-in")
	return p, false, os.WriteFile(p, []byte("#!/bin/sh\necho agnhost stand-in\n"), 0o755)
}

// registry is the package's one registry, started on first use (building
// the images takes seconds).
func registry(t *testing.T) *imagereg.Registry {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "imagereg-test-")
		if err != nil {
			shared.startErr = err
			return
		}
		shared.dir = dir
		shared.agnhost, shared.realAgn, err = agnhostBinary(dir)
		if err != nil {
			shared.startErr = err
			return
		}
		shared.reg, shared.startErr = imagereg.Start(context.Background(), filepath.Join(dir, "reg"),
			imagereg.Binaries{Agnhost: shared.agnhost}, t.Logf)
	})
	if shared.startErr != nil {
		t.Fatalf("start the registry: %v", shared.startErr)
	}
	return shared.reg
}

// requireAgnhost skips t unless the images hold a real agnhost.
func requireAgnhost(t *testing.T) {
	t.Helper()
	registry(t)
	if !shared.realAgn {
		t.Skip(agnhostEnv + " is not set: build a static agnhost (k8s.io/kubernetes/test/images/agnhost, CGO_ENABLED=0) and export its path")
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chroot, file owners, set-user-ID bits)")
	}
}

// imageByID is the registry's image of a manifest.go ImageID.
func imageByID(t *testing.T, r *imagereg.Registry, id string) imagereg.Image {
	t.Helper()
	for _, im := range r.Images() {
		if im.ID == id {
			return im
		}
	}
	t.Fatalf("the registry serves no %s image", id)
	return imagereg.Image{}
}

// pull fetches ref from the registry as the embedded runtime does
// (go-containerregistry, plain HTTP to a loopback host).
func pull(ref string, auth authn.Authenticator) (v1.Image, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return nil, err
	}
	if auth == nil {
		auth = authn.Anonymous
	}
	img, err := remote.Image(r, remote.WithAuth(auth))
	if err != nil {
		return nil, err
	}
	// Read every layer, so a missing blob fails here.
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		_ = rc.Close()
	}
	return img, nil
}

func pullOK(t *testing.T, r *imagereg.Registry, im imagereg.Image) v1.Image {
	t.Helper()
	var auth authn.Authenticator
	if im.Key == "privateRegistry" {
		user, pass := r.PrivateCredentials()
		auth = &authn.Basic{Username: user, Password: pass}
	}
	img, err := pull(im.Ref, auth)
	if err != nil {
		t.Fatalf("pull %s: %v", im.Ref, err)
	}
	return img
}

// rootfs pulls the image of id and unpacks it into a new directory.
func rootfs(t *testing.T, id string) string {
	t.Helper()
	requireRoot(t)
	r := registry(t)
	img := pullOK(t, r, imageByID(t, r, id))
	root := t.TempDir()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	cmd := exec.Command("tar", "-xpf", "-", "--numeric-owner", "-C", root)
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v: %s", id, err, out)
	}
	return root
}

// config is the image config of img.
func config(t *testing.T, img v1.Image) v1.Config {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.Config
}

func fmtList(s []string) string { return fmt.Sprintf("%q", s) }
