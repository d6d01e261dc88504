package imagestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/cri/embedded/layerfs"
)

// hold keeps layers from being deleted until the returned release is
// called.
func (s *Store) hold(diffIDs []string) (release func()) {
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
func (s *Store) haveLayer(diffID string) (layerfs.Stats, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.layers[digestHex(diffID)]
	return st, ok
}

// addLayer unpacks a layer (unless present) from open(), which yields its
// uncompressed tar stream; the stream's digest must equal diffID.
func (s *Store) addLayer(diffID string, open func() (readCloser, error)) (layerfs.Stats, error) {
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
	tmp, err := os.MkdirTemp(s.TmpDir(), "layer-")
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
		err = os.Rename(tmp, s.LayerPath(diffID))
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

// PruneLayers deletes layers referenced by no image, no import in progress
// and no entry of inUse() (diffIDs of layers containers stand on).
func (s *Store) PruneLayers(inUse func() map[string]bool) error {
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
		gone := filepath.Join(s.TmpDir(), "gone-"+l+"-"+randHex(4))
		err := os.Rename(s.LayerPath(l), gone)
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

// Usage sums the store's content: bytes and inodes of layers and records.
func (s *Store) Usage() (bytes, inodes uint64) {
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

func (s *Store) layerBytesLocked(r *Record) uint64 {
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
