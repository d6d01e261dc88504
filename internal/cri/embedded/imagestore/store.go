// Package imagestore is the embedded runtime's local image store: images
// pulled from registries or loaded from archives, their layers unpacked
// once (layerfs) and shared, their records and blobs on disk, and the
// references (tags, digests, IDs) they are found by.
package imagestore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/minilet/minilet/internal/cri/embedded/layerfs"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/minilet/minilet/internal/atomicfile"
)

// Store keeps images under <RootDir>/runtime/images:
//
//	blobs/sha256/<hex>    manifests and configs, content-addressed
//	layers/<hex>/         a layer unpacked in overlayfs format, named by its diffID
//	layers/<hex>.json     its layerfs.Stats, written before the directory is renamed in
//	meta/<hex>.json       an Record, named by the image ID (config digest)
//	tmp/                  work in progress; emptied at start
//
// Every file appears atomically (temp + rename), so a crash leaves at most
// garbage in tmp/ or an unreferenced layer, both removed at the next start.
type Store struct {
	log  *slog.Logger
	root string

	mu     sync.Mutex
	images map[string]*Record       // by ID
	layers map[string]layerfs.Stats // by diffID hex; present and complete

	layerLocks keyedMutex

	// gcMu orders layer deletion (Lock) against the steps that start using
	// layers without an image record holding them yet (RLock): Acquire.
	gcMu sync.RWMutex
	// pending counts the holds on layers (diffID hex) of imports in
	// progress and of Acquire; such layers are not deleted.
	pending map[string]int
}

// Record is the durable record of one image.
type Record struct {
	ID             string      `json:"id"` // sha256 of the config
	RepoTags       []string    `json:"repoTags,omitempty"`
	RepoDigests    []string    `json:"repoDigests,omitempty"`
	ManifestDigest string      `json:"manifestDigest,omitempty"`
	Layers         []string    `json:"layers"` // diffIDs, base first
	Size           uint64      `json:"size"`   // config + unpacked layers
	Created        int64       `json:"created,omitempty"`
	Stored         int64       `json:"stored"`
	Config         ImageConfig `json:"config"`
}

// ImageConfig is what containers take from an image's config.
type ImageConfig struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	StopSignal string   `json:"stopSignal,omitempty"`
}

// Open opens (or creates) the store in root, moving aside records that
// cannot be read or whose layers are missing.
func Open(log *slog.Logger, root string) (*Store, error) {
	s := &Store{log: log, root: root, images: map[string]*Record{}, layers: map[string]layerfs.Stats{}, pending: map[string]int{}}
	for _, d := range []string{s.blobDir(), s.layerDir(), s.metaDir(), s.TmpDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create image store dir: %w", err)
		}
	}
	if err := removeContents(s.TmpDir()); err != nil {
		return nil, fmt.Errorf("clean image store tmp dir: %w", err)
	}
	entries, err := os.ReadDir(s.metaDir())
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		p := filepath.Join(s.metaDir(), e.Name())
		var rec Record
		if err := statefile.Read(p, &rec); err != nil || !strings.HasPrefix(rec.ID, "sha256:") {
			statefile.Quarantine(log.Warn, p, err)
			continue
		}
		s.images[rec.ID] = &rec
	}
	entries, err = os.ReadDir(s.layerDir())
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		var st layerfs.Stats
		if err := statefile.Read(filepath.Join(s.layerDir(), e.Name()+".json"), &st); err != nil {
			log.Warn("removing image layer without metadata", "layer", e.Name(), "err", err)
			_ = os.RemoveAll(filepath.Join(s.layerDir(), e.Name()))
			continue
		}
		s.layers[e.Name()] = st
	}
	// An image whose layers are missing cannot run: move its record aside.
	for id, rec := range s.images {
		for _, l := range rec.Layers {
			if _, ok := s.layers[digestHex(l)]; !ok {
				statefile.Quarantine(log.Warn, s.metaPath(id), fmt.Errorf("layer %s is missing", l))
				delete(s.images, id)
				break
			}
		}
	}
	return s, nil
}

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

func (s *Store) blobDir() string  { return filepath.Join(s.root, "blobs", "sha256") }
func (s *Store) layerDir() string { return filepath.Join(s.root, "layers") }
func (s *Store) metaDir() string  { return filepath.Join(s.root, "meta") }

// TmpDir holds work in progress, in the store's filesystem.
func (s *Store) TmpDir() string { return filepath.Join(s.root, "tmp") }

func (s *Store) metaPath(id string) string {
	return filepath.Join(s.metaDir(), digestHex(id)+".json")
}

// LayerPath is the unpacked directory of the layer with this diffID.
func (s *Store) LayerPath(diffID string) string {
	return filepath.Join(s.layerDir(), digestHex(diffID))
}

func digestHex(d string) string { return strings.TrimPrefix(d, "sha256:") }

// writeBlob stores data under its sha256.
func (s *Store) writeBlob(h v1.Hash, data []byte) error {
	p := filepath.Join(s.blobDir(), h.Hex)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := atomicfile.WriteFile(p, data, 0o600, atomicfile.Durable); err != nil {
		return fmt.Errorf("store blob %s: %w", h, err)
	}
	return nil
}

// putImage stores rec (its layers already added) and moves its tags and
// digests away from any other image that held them.
func (s *Store) putImage(rec *Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.images[rec.ID]; ok {
		rec.RepoTags = union(old.RepoTags, rec.RepoTags)
		rec.RepoDigests = union(old.RepoDigests, rec.RepoDigests)
		rec.Stored = old.Stored
	}
	for id, other := range s.images {
		if id == rec.ID {
			continue
		}
		tags, digests := minus(other.RepoTags, rec.RepoTags), minus(other.RepoDigests, rec.RepoDigests)
		if len(tags) == len(other.RepoTags) && len(digests) == len(other.RepoDigests) {
			continue
		}
		upd := *other
		upd.RepoTags, upd.RepoDigests = tags, digests
		if err := statefile.Write(s.metaPath(id), &upd); err != nil {
			return fmt.Errorf("untag image %s: %w", id, err)
		}
		s.images[id] = &upd
	}
	if err := statefile.Write(s.metaPath(rec.ID), rec); err != nil {
		return fmt.Errorf("record image %s: %w", rec.ID, err)
	}
	s.images[rec.ID] = rec
	return nil
}

// List returns copies of all records, sorted by ID.
func (s *Store) List() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.images))
	for _, r := range s.images {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Get finds an image by ID (with or without "sha256:", or a unique prefix
// of at least 12 hex digits), repo tag or repo digest, in any of the forms
// NormalizeRef accepts.
func (s *Store) Get(ref string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.images[ref]; ok {
		return *r, true
	}
	if r, ok := s.images["sha256:"+ref]; ok {
		return *r, true
	}
	if norm, err := NormalizeRef(ref); err == nil {
		for _, r := range s.images {
			if slices.Contains(r.RepoTags, norm) || slices.Contains(r.RepoDigests, norm) {
				return *r, true
			}
		}
	}
	if h := digestHex(ref); len(h) >= 12 && isHex(h) {
		var found *Record
		for id, r := range s.images {
			if strings.HasPrefix(digestHex(id), h) {
				if found != nil {
					return Record{}, false
				}
				found = r
			}
		}
		if found != nil {
			return *found, true
		}
	}
	return Record{}, false
}

// Remove deletes an image record; layers no other image and no container
// in inUse uses are deleted too. It reports whether the image existed.
func (s *Store) Remove(id string, inUse func() map[string]bool) (bool, error) {
	s.mu.Lock()
	_, ok := s.images[id]
	if ok {
		if err := os.Remove(s.metaPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.mu.Unlock()
			return true, fmt.Errorf("remove image %s: %w", id, err)
		}
		delete(s.images, id)
	}
	s.mu.Unlock()
	return ok, s.PruneLayers(inUse)
}

// Acquire finds an image like Get and keeps its layers from being deleted
// (even if the image is removed meanwhile) until release is called: a
// container is being made from them, which will hold them from then on.
func (s *Store) Acquire(ref string) (rec Record, release func(), ok bool) {
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	if rec, ok = s.Get(ref); !ok {
		return Record{}, nil, false
	}
	return rec, s.hold(rec.Layers), true
}

func removeContents(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// union returns a followed by the elements of b not in a.
func union(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// minus returns the elements of a not in b.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
