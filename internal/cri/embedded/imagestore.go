package embedded

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/minilet/minilet/internal/cri/embedded/layerfs"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/minilet/minilet/internal/atomicfile"
)

// imageStore keeps images under <RootDir>/runtime/images:
//
//	blobs/sha256/<hex>    manifests and configs, content-addressed
//	layers/<hex>/         a layer unpacked in overlayfs format, named by its diffID
//	layers/<hex>.json     its layerfs.Stats, written before the directory is renamed in
//	meta/<hex>.json       an imageRecord, named by the image ID (config digest)
//	tmp/                  work in progress; emptied at start
//
// Every file appears atomically (temp + rename), so a crash leaves at most
// garbage in tmp/ or an unreferenced layer, both removed at the next start.
type imageStore struct {
	log  *slog.Logger
	root string

	mu     sync.Mutex
	images map[string]*imageRecord  // by ID
	layers map[string]layerfs.Stats // by diffID hex; present and complete

	layerLocks keyedMutex

	// gcMu orders layer deletion (Lock) against the steps that start using
	// layers without an image record holding them yet (RLock): a container
	// being created from an image.
	gcMu sync.RWMutex
	// pending counts imports in progress per layer (diffID hex); such
	// layers are not deleted.
	pending map[string]int
}

// imageRecord is the durable record of one image.
type imageRecord struct {
	ID             string      `json:"id"` // sha256 of the config
	RepoTags       []string    `json:"repoTags,omitempty"`
	RepoDigests    []string    `json:"repoDigests,omitempty"`
	ManifestDigest string      `json:"manifestDigest,omitempty"`
	Layers         []string    `json:"layers"` // diffIDs, base first
	Size           uint64      `json:"size"`   // config + unpacked layers
	Created        int64       `json:"created,omitempty"`
	Stored         int64       `json:"stored"`
	Config         imageConfig `json:"config"`
}

// imageConfig is what containers take from an image's config.
type imageConfig struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	StopSignal string   `json:"stopSignal,omitempty"`
}

func openImageStore(log *slog.Logger, root string) (*imageStore, error) {
	s := &imageStore{log: log, root: root, images: map[string]*imageRecord{}, layers: map[string]layerfs.Stats{}, pending: map[string]int{}}
	for _, d := range []string{s.blobDir(), s.layerDir(), s.metaDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create image store dir: %w", err)
		}
	}
	if err := removeContents(s.tmpDir()); err != nil {
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
		var rec imageRecord
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

func (s *imageStore) blobDir() string  { return filepath.Join(s.root, "blobs", "sha256") }
func (s *imageStore) layerDir() string { return filepath.Join(s.root, "layers") }
func (s *imageStore) metaDir() string  { return filepath.Join(s.root, "meta") }
func (s *imageStore) tmpDir() string   { return filepath.Join(s.root, "tmp") }

func (s *imageStore) metaPath(id string) string {
	return filepath.Join(s.metaDir(), digestHex(id)+".json")
}

// layerPath is the unpacked directory of the layer with this diffID.
func (s *imageStore) layerPath(diffID string) string {
	return filepath.Join(s.layerDir(), digestHex(diffID))
}

func digestHex(d string) string { return strings.TrimPrefix(d, "sha256:") }

// writeBlob stores data under its sha256.
func (s *imageStore) writeBlob(h v1.Hash, data []byte) error {
	p := filepath.Join(s.blobDir(), h.Hex)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := atomicfile.WriteFile(p, data, 0o600, atomicfile.Durable); err != nil {
		return fmt.Errorf("store blob %s: %w", h, err)
	}
	return nil
}

// hold marks layers as being imported until the returned release is called.
func (s *imageStore) hold(diffIDs []string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range diffIDs {
		s.pending[digestHex(d)]++
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, d := range diffIDs {
			if s.pending[digestHex(d)]--; s.pending[digestHex(d)] <= 0 {
				delete(s.pending, digestHex(d))
			}
		}
	}
}

// haveLayer reports the stats of a complete layer.
func (s *imageStore) haveLayer(diffID string) (layerfs.Stats, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.layers[digestHex(diffID)]
	return st, ok
}

// addLayer unpacks a layer (unless present) from open(), which yields its
// uncompressed tar stream; the stream's digest must equal diffID.
func (s *imageStore) addLayer(diffID string, open func() (readCloser, error)) (layerfs.Stats, error) {
	unlock := s.layerLocks.lock(diffID)
	defer unlock()
	if st, ok := s.haveLayer(diffID); ok {
		return st, nil
	}
	rc, err := open()
	if err != nil {
		return layerfs.Stats{}, fmt.Errorf("open layer %s: %w", diffID, err)
	}
	defer func() { _ = rc.Close() }()
	tmp, err := os.MkdirTemp(s.tmpDir(), "layer-")
	if err != nil {
		return layerfs.Stats{}, err
	}
	_ = os.Chmod(tmp, 0o755) // the layer's own "./" entry may change it
	st, err := layerfs.Unpack(tmp, rc)
	if err == nil && st.DiffID != diffID {
		err = fmt.Errorf("content digest %s does not match the image config's diffID", st.DiffID)
	}
	if err == nil {
		err = statefile.Write(filepath.Join(s.layerDir(), digestHex(diffID)+".json"), st)
	}
	if err == nil {
		err = os.Rename(tmp, s.layerPath(diffID))
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return layerfs.Stats{}, fmt.Errorf("unpack layer %s: %w", diffID, err)
	}
	s.mu.Lock()
	s.layers[digestHex(diffID)] = st
	s.mu.Unlock()
	return st, nil
}

type readCloser interface {
	Read([]byte) (int, error)
	Close() error
}

// putImage stores rec (its layers already added) and moves its tags and
// digests away from any other image that held them.
func (s *imageStore) putImage(rec *imageRecord) error {
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

// list returns copies of all records, sorted by ID.
func (s *imageStore) list() []imageRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]imageRecord, 0, len(s.images))
	for _, r := range s.images {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// get finds an image by ID (with or without "sha256:", or a unique prefix
// of at least 12 hex digits), repo tag or repo digest, in any of the forms
// normalizeRef accepts.
func (s *imageStore) get(ref string) (imageRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.images[ref]; ok {
		return *r, true
	}
	if r, ok := s.images["sha256:"+ref]; ok {
		return *r, true
	}
	if norm, err := normalizeRef(ref); err == nil {
		for _, r := range s.images {
			if contains(r.RepoTags, norm) || contains(r.RepoDigests, norm) {
				return *r, true
			}
		}
	}
	if h := digestHex(ref); len(h) >= 12 && isHex(h) {
		var found *imageRecord
		for id, r := range s.images {
			if strings.HasPrefix(digestHex(id), h) {
				if found != nil {
					return imageRecord{}, false
				}
				found = r
			}
		}
		if found != nil {
			return *found, true
		}
	}
	return imageRecord{}, false
}

// remove deletes an image record; layers no other image and no container
// in inUse uses are deleted too. It reports whether the image existed.
func (s *imageStore) remove(id string, inUse func() map[string]bool) (bool, error) {
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
	return ok, s.pruneLayers(inUse)
}

// pruneLayers deletes layers referenced by no image, no import in progress
// and no entry of inUse() (diffIDs of layers containers stand on).
func (s *imageStore) pruneLayers(inUse func() map[string]bool) error {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	used := inUse()
	s.mu.Lock()
	keep := map[string]bool{}
	for l := range used {
		keep[digestHex(l)] = true
	}
	for l, n := range s.pending {
		if n > 0 {
			keep[l] = true
		}
	}
	for _, r := range s.images {
		for _, l := range r.Layers {
			keep[digestHex(l)] = true
		}
	}
	var drop []string
	for l := range s.layers {
		if !keep[l] {
			drop = append(drop, l)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, l := range drop {
		unlock := s.layerLocks.lock("sha256:" + l)
		s.mu.Lock()
		delete(s.layers, l)
		s.mu.Unlock()
		// Rename first so a crash never leaves a half-deleted layer that
		// looks complete.
		gone := filepath.Join(s.tmpDir(), "gone-"+l+"-"+randHex(4))
		err := os.Rename(s.layerPath(l), gone)
		if err == nil {
			err = os.Remove(filepath.Join(s.layerDir(), l+".json"))
			_ = os.RemoveAll(gone)
		}
		unlock()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove layer %s: %w", l, err))
		}
	}
	return errors.Join(errs...)
}

// usage sums the store's content: bytes and inodes of layers and records.
func (s *imageStore) usage() (bytes, inodes uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.layers {
		bytes += st.Size
		inodes += st.Inodes + 2
	}
	for _, r := range s.images {
		bytes += r.Size - s.layerBytesLocked(r)
		inodes++
	}
	return bytes, inodes
}

func (s *imageStore) layerBytesLocked(r *imageRecord) uint64 {
	var n uint64
	for _, l := range r.Layers {
		n += s.layers[digestHex(l)].Size
	}
	if n > r.Size {
		return r.Size
	}
	return n
}

// keyedMutex serializes work per key (one unpack per layer at a time).
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// union returns a followed by the elements of b not in a.
func union(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, x := range b {
		if !contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// minus returns the elements of a not in b.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
