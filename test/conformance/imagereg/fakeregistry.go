package imagereg

import (
	"fmt"
	"io"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// fakeRegistryDir is where agnhost's fake-registry-server reads images.
const fakeRegistryDir = "/var/registry"

// The image agnhost's fake registry serves, as upstream's images.txt
// names it: the pause image under the tag "testing". The e2e specs
// "should (not) be able to pull from private registry with(out) secret"
// run `agnhost fake-registry-server --private` on the node's port 5000 and
// pull localhost:5000/pause:testing with user:password.
const (
	fakeRepo = "pause"
	fakeTag  = "testing"
)

// addFakeRegistry lays img out in t the way fake-registry-server reads
// it: under /var/registry/REPO, a tag file holding the manifest digest,
// and the manifest and blobs at
// {manifests,blobs}/sha256/<first two hex>/<hex>/data. (Upstream stores a
// manifest list there; a single image manifest serves the same pulls.)
func addFakeRegistry(t *tree, img v1.Image) error {
	base := path.Join(fakeRegistryDir, fakeRepo)
	manifest, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("fake registry: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("fake registry: %w", err)
	}
	t.file(path.Join(base, "manifests", fakeTag), 0o644, []byte(digest.String()+"\n"))
	t.file(digestPath(path.Join(base, "manifests"), digest), 0o644, manifest)

	config, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("fake registry: %w", err)
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("fake registry: %w", err)
	}
	t.file(digestPath(path.Join(base, "blobs"), configDigest), 0o644, config)

	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("fake registry: %w", err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return fmt.Errorf("fake registry: %w", err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return fmt.Errorf("fake registry: layer %s: %w", d, err)
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("fake registry: layer %s: %w", d, err)
		}
		t.file(digestPath(path.Join(base, "blobs"), d), 0o644, b)
	}
	return nil
}

// digestPath is the registry storage path of a digest under base.
func digestPath(base string, h v1.Hash) string {
	return path.Join(base, h.Algorithm, h.Hex[:2], h.Hex, "data")
}
