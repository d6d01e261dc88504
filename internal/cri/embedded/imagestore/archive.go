package imagestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/minilet/minilet/internal/cri/embedded/layerfs"
	"github.com/minilet/minilet/internal/errdefs"
)

// LoadedImage is one image an archive held.
type LoadedImage struct {
	ID       string   `json:"id"`
	RepoTags []string `json:"repoTags,omitempty"`
}

// OCI annotations that name an image in an OCI layout's index.
const (
	annotationRefName       = "org.opencontainers.image.ref.name"
	annotationContainerName = "io.containerd.image.name"
)

// LoadArchive imports every image of a docker-archive (`docker save`) or
// OCI-layout tarball read from archive, stored at now (Unix ns). A docker
// archive's "RepoTags" and an OCI index's image-name annotations become the
// images' tags.
func (s *Store) LoadArchive(ctx context.Context, archive io.Reader, now int64) ([]LoadedImage, error) {
	dir, err := os.MkdirTemp(s.TmpDir(), "load-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := layerfs.Extract(dir, archive); err != nil {
		return nil, fmt.Errorf("load image archive: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	var out []LoadedImage
	switch {
	case fileExists(filepath.Join(dir, "manifest.json")):
		out, err = s.loadDockerArchive(ctx, dir, now)
	case fileExists(filepath.Join(dir, "index.json")):
		out, err = s.loadOCILayout(ctx, dir, now)
	default:
		return nil, fmt.Errorf("load image archive: neither manifest.json (docker-archive) nor index.json (OCI layout) found: %w", errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return out, err
	}
	for _, img := range out {
		s.log.Info("image loaded", "image", img.ID, "tags", img.RepoTags)
	}
	return out, nil
}

func (s *Store) loadDockerArchive(ctx context.Context, dir string, now int64) ([]LoadedImage, error) {
	var manifest tarball.Manifest
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &manifest); err != nil {
		return nil, fmt.Errorf("load docker archive: manifest.json: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	var out []LoadedImage
	for i, d := range manifest {
		src := imageSource{}
		if src.config, err = readArchiveFile(dir, d.Config); err != nil {
			return out, fmt.Errorf("load docker archive: image %d: config: %v: %w", i, err, errdefs.ErrInvalidArgument)
		}
		for _, l := range d.Layers {
			p, err := archivePath(dir, l)
			if err != nil {
				return out, fmt.Errorf("load docker archive: image %d: layer %q: %v: %w", i, l, err, errdefs.ErrInvalidArgument)
			}
			layer, err := tarball.LayerFromFile(p)
			if err != nil {
				return out, fmt.Errorf("load docker archive: image %d: layer %q: %v: %w", i, l, err, errdefs.ErrInvalidArgument)
			}
			src.layers = append(src.layers, layer.Uncompressed)
		}
		var tags []string
		for _, t := range d.RepoTags {
			n, err := NormalizeRef(t)
			if err != nil {
				return out, fmt.Errorf("load docker archive: image %d: RepoTags %q: %v: %w", i, t, err, errdefs.ErrInvalidArgument)
			}
			tags = append(tags, n)
		}
		rec, err := s.importImage(ctx, src, tags, nil, now)
		if err != nil {
			return out, fmt.Errorf("load docker archive: image %d: %w", i, err)
		}
		out = append(out, LoadedImage{ID: rec.ID, RepoTags: tags})
	}
	return out, nil
}

func (s *Store) loadOCILayout(ctx context.Context, dir string, now int64) ([]LoadedImage, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("load OCI layout: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("load OCI layout: index.json: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	var out []LoadedImage
	for _, desc := range im.Manifests {
		img, err := imageForPlatform(idx, desc)
		if err != nil {
			return out, fmt.Errorf("load OCI layout: manifest %s: %v: %w", desc.Digest, err, errdefs.ErrInvalidArgument)
		}
		if img == nil {
			continue
		}
		src, err := sourceFromImage(img)
		if err != nil {
			return out, fmt.Errorf("load OCI layout: manifest %s: %v: %w", desc.Digest, err, errdefs.ErrInvalidArgument)
		}
		var tags, digests []string
		if n := ociImageName(desc.Annotations); n != "" {
			norm, err := NormalizeRef(n)
			if err != nil {
				return out, fmt.Errorf("load OCI layout: manifest %s: image name %q: %v: %w", desc.Digest, n, err, errdefs.ErrInvalidArgument)
			}
			tags = []string{norm}
			if ref, err := name.ParseReference(norm); err == nil {
				digests = []string{registryName(ref) + "/" + ref.Context().RepositoryStr() + "@" + desc.Digest.String()}
			}
		}
		rec, err := s.importImage(ctx, src, tags, digests, now)
		if err != nil {
			return out, fmt.Errorf("load OCI layout: manifest %s: %w", desc.Digest, err)
		}
		out = append(out, LoadedImage{ID: rec.ID, RepoTags: tags})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("load OCI layout: no image for linux/%s in index.json: %w", goruntime.GOARCH, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

// imageForPlatform returns the image desc names, picking this machine's
// platform from a nested index; nil when the index has none for it.
func imageForPlatform(idx v1.ImageIndex, desc v1.Descriptor) (v1.Image, error) {
	if !desc.MediaType.IsIndex() {
		return idx.Image(desc.Digest)
	}
	child, err := idx.ImageIndex(desc.Digest)
	if err != nil {
		return nil, err
	}
	cm, err := child.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range cm.Manifests {
		if d.Platform == nil || (d.Platform.OS == "linux" && d.Platform.Architecture == goruntime.GOARCH) {
			if d.MediaType.IsImage() {
				return child.Image(d.Digest)
			}
		}
	}
	return nil, nil
}

// ociImageName is the full image name an OCI index entry carries: the
// containerd annotation, or ref.name when that is a full reference (a bare
// tag such as "latest" names nothing).
func ociImageName(ann map[string]string) string {
	if n := ann[annotationContainerName]; n != "" {
		return n
	}
	n := ann[annotationRefName]
	if strings.ContainsAny(n, "/:") {
		return n
	}
	return ""
}

// archivePath resolves a path named by the archive's manifest, refusing
// anything (through symlinks too) outside dir.
func archivePath(dir, rel string) (string, error) {
	p, err := filepath.EvalSymlinks(filepath.Join(dir, path.Clean("/"+rel)))
	if err != nil {
		return "", err
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(p, realDir+string(filepath.Separator)) {
		return "", errors.New("points outside the archive")
	}
	return p, nil
}

func readArchiveFile(dir, rel string) ([]byte, error) {
	p, err := archivePath(dir, rel)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
