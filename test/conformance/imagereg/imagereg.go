// Package imagereg builds the test images the upstream e2e
// [NodeConformance] specs use, from programs of this machine (agnhost built
// from the Kubernetes tree, Debian's static busybox, small Go programs),
// and serves them from a registry on the loopback interface, with the
// KUBE_TEST_REPO_LIST yaml that points e2e.test at it.
//
// Every image is built reproducibly (sorted tar entries, one fixed
// timestamp, numeric owners), so the same inputs give the same digests.
// The registry speaks plain HTTP on 127.0.0.1, which both runtimes pull
// from without configuration: go-containerregistry (the embedded runtime)
// and containerd's CRI both use HTTP for a loopback registry host.
package imagereg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
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

// Binaries are host programs the images are made of.
type Binaries struct {
	Agnhost string // static agnhost built from k8s.io/kubernetes/test/images/agnhost (the runner builds it)
}

// Registry is a running loopback registry holding the test images.
type Registry struct {
	host     string
	repoList string
	images   []Image
	srv      *http.Server
	done     chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Start builds every image the [NodeConformance] specs use, pushes them to an
// in-process registry serving plain HTTP on 127.0.0.1:<free port>, and writes
// the KUBE_TEST_REPO_LIST yaml into dir.
func Start(ctx context.Context, dir string, bins Binaries, logf func(string, ...any)) (*Registry, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if bins.Agnhost == "" {
		return nil, errors.New("imagereg: Binaries.Agnhost is empty: the agnhost image needs a static agnhost binary")
	}
	if st, err := os.Stat(bins.Agnhost); err != nil {
		return nil, fmt.Errorf("imagereg: Binaries.Agnhost: %w", err)
	} else if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("imagereg: Binaries.Agnhost %s is not an executable file", bins.Agnhost)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"layers", "blobs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("imagereg: %w", err)
		}
	}

	start := time.Now()
	built, err := buildImages(ctx, dir, bins)
	if err != nil {
		return nil, fmt.Errorf("imagereg: %w", err)
	}
	logf("imagereg: built %d images in %s", len(built), time.Since(start).Round(time.Millisecond))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("imagereg: listen: %w", err)
	}
	handler := registry.New(
		registry.Logger(log.New(io.Discard, "", 0)),
		registry.WithBlobHandler(registry.NewDiskBlobHandler(filepath.Join(dir, "blobs"))),
	)
	r := &Registry{
		host:     ln.Addr().String(),
		repoList: filepath.Join(dir, "repo-list.yaml"),
		srv:      &http.Server{Handler: guard(handler), ReadHeaderTimeout: 30 * time.Second},
		done:     make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("imagereg: serve: %v", err)
		}
	}()

	start = time.Now()
	for _, im := range catalog {
		prefix, err := repoPrefix(r.host, im.Key)
		if err != nil {
			_ = r.Close()
			return nil, fmt.Errorf("imagereg: %w", err)
		}
		im.Ref = prefix + "/" + im.Name + ":" + im.Tag
		im.Contents = contents[im.kind]
		if err := push(ctx, im, built[im.kind]); err != nil {
			_ = r.Close()
			return nil, fmt.Errorf("imagereg: %w", err)
		}
		r.images = append(r.images, im)
	}
	logf("imagereg: pushed %d references to %s in %s", len(r.images), r.host, time.Since(start).Round(time.Millisecond))

	if err := writeRepoList(r.repoList, r.host); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("imagereg: repo list: %w", err)
	}
	return r, nil
}

// Host is the registry's address, "127.0.0.1:PORT".
func (r *Registry) Host() string { return r.host }

// RepoList is the path of the yaml for KUBE_TEST_REPO_LIST.
func (r *Registry) RepoList() string { return r.repoList }

// Images lists the images the registry serves, with their references.
func (r *Registry) Images() []Image { return append([]Image(nil), r.images...) }

// PrivateCredentials are the user and password the private repository
// (the repo list's privateRegistry) requires.
func (r *Registry) PrivateCredentials() (user, password string) {
	return privateUser, privatePassword
}

// Close stops the registry and waits for its server to end. It is
// idempotent.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.closeErr = r.srv.Shutdown(ctx)
		<-r.done
	})
	return r.closeErr
}

// push writes img to im.Ref on the registry.
func push(ctx context.Context, im Image, img v1.Image) error {
	ref, err := name.ParseReference(im.Ref, name.Insecure)
	if err != nil {
		return fmt.Errorf("push %s: %w", im.Ref, err)
	}
	opts := []remote.Option{remote.WithContext(ctx)}
	if im.Key == "privateRegistry" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: privateUser, Password: privatePassword}))
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		return fmt.Errorf("push %s: %w", im.Ref, err)
	}
	return nil
}

// image assembles layers (written by tree.writeLayer) under cfg.
func image(dir string, cfg v1.Config, createdBy string, layers ...*tree) (v1.Image, error) {
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		Config:       cfg,
	})
	if err != nil {
		return nil, err
	}
	for i, t := range layers {
		l, err := layerOf(dir, t)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l,
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: fmt.Sprintf("minilet imagereg: %s (layer %d)", createdBy, i+1)},
		})
		if err != nil {
			return nil, err
		}
	}
	return img, nil
}

// layerOf writes t once (trees are shared between images) and returns it
// as a layer.
func layerOf(dir string, t *tree) (v1.Layer, error) {
	if t.layer != nil {
		return t.layer, nil
	}
	f, err := os.CreateTemp(filepath.Join(dir, "layers"), "layer-*.tar.gz")
	if err != nil {
		return nil, err
	}
	p := f.Name()
	_ = f.Close()
	if err := t.writeLayer(p); err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromFile(p)
	if err != nil {
		return nil, err
	}
	d, err := l.Digest()
	if err != nil {
		return nil, err
	}
	// Name the file by its digest, so dir shows what it holds.
	final := filepath.Join(dir, "layers", d.Hex+".tar.gz")
	if err := os.Rename(p, final); err != nil {
		return nil, err
	}
	if l, err = tarball.LayerFromFile(final); err != nil {
		return nil, err
	}
	t.layer = l
	return l, nil
}
