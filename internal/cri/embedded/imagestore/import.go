package imagestore

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/minilet/minilet/internal/cri/embedded/layerfs"
)

// imageSource is an image to import, whatever it came from.
type imageSource struct {
	config         []byte
	manifest       []byte // nil when the source has none (docker-archive)
	manifestDigest v1.Hash
	// layers open the uncompressed tar streams, base layer first.
	layers []func() (io.ReadCloser, error)
}

// maxParallelLayers bounds the layers fetched and unpacked at once per image.
const maxParallelLayers = 3

// importImage unpacks src's layers, stores its blobs and records it under
// tags and digests.
func (s *Store) importImage(ctx context.Context, src imageSource, tags, digests []string, now int64) (Record, error) {
	var cf v1.ConfigFile
	if err := json.Unmarshal(src.config, &cf); err != nil {
		return Record{}, fmt.Errorf("image config: %w", err)
	}
	if cf.OS != "" && cf.OS != "linux" {
		return Record{}, fmt.Errorf("image config: os %q is not linux", cf.OS)
	}
	if len(cf.RootFS.DiffIDs) != len(src.layers) {
		return Record{}, fmt.Errorf("image config lists %d layers, the manifest %d", len(cf.RootFS.DiffIDs), len(src.layers))
	}
	id := fmt.Sprintf("sha256:%x", sha256.Sum256(src.config))
	rec := Record{ID: id, RepoTags: tags, RepoDigests: digests, Size: uint64(len(src.config)), Stored: now}
	if src.manifest != nil {
		rec.ManifestDigest = src.manifestDigest.String()
	}
	if !cf.Created.IsZero() {
		rec.Created = cf.Created.UnixNano()
	}
	c := cf.Config
	rec.Config = ImageConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, StopSignal: c.StopSignal}

	var diffIDs []string
	for _, d := range cf.RootFS.DiffIDs {
		diffIDs = append(diffIDs, d.String())
	}
	defer s.hold(diffIDs)()
	stats := make([]layerfs.Stats, len(src.layers))
	errs := make([]error, len(src.layers))
	sem := make(chan struct{}, maxParallelLayers)
	var wg sync.WaitGroup
	for i, open := range src.layers {
		diffID := cf.RootFS.DiffIDs[i].String()
		rec.Layers = append(rec.Layers, diffID)
		if st, ok := s.haveLayer(diffID); ok {
			stats[i] = st
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			if err := ctx.Err(); err != nil {
				errs[i] = err
				return
			}
			stats[i], errs[i] = s.addLayer(diffID, func() (readCloser, error) { return open() })
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return Record{}, fmt.Errorf("layer %d of %d: %w", i+1, len(errs), err)
		}
	}
	seen := map[string]bool{}
	for i, st := range stats {
		if !seen[rec.Layers[i]] {
			seen[rec.Layers[i]] = true
			rec.Size += st.Size
		}
	}
	if err := s.writeBlob(v1.Hash{Algorithm: "sha256", Hex: digestHex(id)}, src.config); err != nil {
		return Record{}, err
	}
	if src.manifest != nil {
		if err := s.writeBlob(src.manifestDigest, src.manifest); err != nil {
			return Record{}, err
		}
	}
	if err := s.putImage(&rec); err != nil {
		return Record{}, err
	}
	r, _ := s.Get(id)
	return r, nil
}

// sourceFromImage adapts a go-containerregistry image.
func sourceFromImage(img v1.Image) (imageSource, error) {
	cfg, err := img.RawConfigFile()
	if err != nil {
		return imageSource{}, fmt.Errorf("read image config: %w", err)
	}
	man, err := img.RawManifest()
	if err != nil {
		return imageSource{}, fmt.Errorf("read image manifest: %w", err)
	}
	dig, err := img.Digest()
	if err != nil {
		return imageSource{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return imageSource{}, fmt.Errorf("read image layers: %w", err)
	}
	src := imageSource{config: cfg, manifest: man, manifestDigest: dig}
	for _, l := range layers {
		src.layers = append(src.layers, l.Uncompressed)
	}
	return src, nil
}
