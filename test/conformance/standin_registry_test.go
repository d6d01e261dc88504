package conformance

// A stand-in for package test/conformance/imagereg (being written on
// another branch), with its interface, so that the runner works before it
// lands: an in-memory registry on loopback holding the few images the
// first specs need, all built from the static agnhost and the host's static
// busybox. Delete this file once imagereg is merged and use imagereg.Start.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Binaries are the programs the images are made of (imagereg.Binaries).
type Binaries struct{ Agnhost string }

// Registry is a running loopback registry (imagereg.Registry).
type Registry struct {
	srv      *http.Server
	host     string
	repoList string
}

// Host is the registry's host:port.
func (r *Registry) Host() string { return r.host }

// RepoList is the KUBE_TEST_REPO_LIST file pointing the e2e framework here.
func (r *Registry) RepoList() string { return r.repoList }

// Close stops the registry.
func (r *Registry) Close() error { return r.srv.Close() }

// StartRegistry serves the test images on 127.0.0.1 and writes the repo
// list into dir.
func StartRegistry(ctx context.Context, dir string, bins Binaries, logf func(string, ...any)) (*Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Registry{srv: &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}, host: ln.Addr().String()}
	go func() { _ = r.srv.Serve(ln) }()
	ok := false
	defer func() {
		if !ok {
			_ = r.Close()
		}
	}()

	agnhost, err := os.ReadFile(bins.Agnhost)
	if err != nil {
		return nil, fmt.Errorf("agnhost: %w", err)
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox (Debian's busybox-static): %w", err)
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	applets := strings.Fields(string(out))
	base := func(extra map[string][]byte) ([]byte, error) {
		return tarOf(busybox, applets, extra)
	}
	withAgnhost, err := base(map[string][]byte{"agnhost": agnhost})
	if err != nil {
		return nil, err
	}
	plain, err := base(nil)
	if err != nil {
		return nil, err
	}
	images := []struct {
		refs  []string
		layer []byte
		entry []string
	}{
		{[]string{"e2e-test-images/agnhost:2.66.1", "e2e-test-images/agnhost:2.55", "private/agnhost:2.6"}, withAgnhost, []string{"/agnhost"}},
		{[]string{"pause:3.10.2"}, withAgnhost, []string{"/agnhost", "pause"}},
		{[]string{"e2e-test-images/busybox:1.37.0-2", "library/busybox:1.37.0-2"}, plain, nil},
	}
	for _, im := range images {
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(im.layer)), nil })
		if err != nil {
			return nil, err
		}
		cfg := v1.Config{Entrypoint: im.entry, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
		if im.entry == nil {
			cfg.Cmd = []string{"sh"}
		}
		img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: "amd64", Config: cfg, RootFS: v1.RootFS{Type: "layers"}})
		if err != nil {
			return nil, err
		}
		// Appending records the layer's diff ID in the config.
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, err
		}
		for _, ref := range im.refs {
			tag, err := name.NewTag(r.host+"/"+ref, name.Insecure)
			if err != nil {
				return nil, err
			}
			if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
				return nil, fmt.Errorf("pushing %s: %w", tag, err)
			}
			logf("stand-in registry: pushed %s", tag)
		}
	}
	list := fmt.Sprintf(`promoterE2eRegistry: %[1]s/e2e-test-images
buildImageRegistry: %[1]s/build-image
gcEtcdRegistry: %[1]s
gcRegistry: %[1]s
sigStorageRegistry: %[1]s/sig-storage
privateRegistry: %[1]s/private
dockerLibraryRegistry: %[1]s/library
cloudProviderGcpRegistry: %[1]s/cloud-provider-gcp
`, r.host)
	r.repoList = filepath.Join(dir, "repo-list.yaml")
	if err := os.WriteFile(r.repoList, []byte(list), 0o644); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// tarOf is a root filesystem: busybox with its applet links in /bin, the
// extra files at the root (mode 0755), and the usual empty directories.
func tarOf(busybox []byte, applets []string, extra map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "etc/", "tmp/", "proc/", "sys/", "dev/", "root/", "var/", "usr/", "usr/bin/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode}); err != nil {
			return nil, err
		}
	}
	files := map[string][]byte{
		"bin/busybox": busybox,
		"etc/passwd":  []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
		"etc/group":   []byte("root:x:0:\nnogroup:x:65534:\n"),
	}
	for n, b := range extra {
		files[n] = b
	}
	for n, b := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o755, Size: int64(len(b))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	for _, a := range applets {
		if a == "busybox" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
