package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/minilet/minilet/internal/atomicfile"
)

// stateFile keeps what detection learned across agent restarts: when
// each image was first seen and last used. Sizes, tags and pins come
// from the runtime again at the next detection.
const stateFile = "image_gc_state.json"

type persisted struct {
	Images map[string]persistedImage `json:"images"`
}

type persistedImage struct {
	FirstDetected time.Time `json:"firstDetected"`
	LastUsed      time.Time `json:"lastUsed,omitzero"`
}

// loadState reads the state file; a missing file is an empty state.
func loadState(dir string) (map[string]persistedImage, bool, error) {
	if dir == "" {
		return nil, false, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read image GC state: %w", err)
	}
	var p persisted
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, false, fmt.Errorf("parse image GC state %s: %w", filepath.Join(dir, stateFile), err)
	}
	return p.Images, true, nil
}

// saveState writes the state atomically (temp file, fsync, rename).
func saveState(dir string, imgs map[string]persistedImage) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("image GC state dir: %w", err)
	}
	b, err := json.Marshal(persisted{Images: imgs})
	if err != nil {
		return fmt.Errorf("encode image GC state: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, stateFile), b, 0o600, atomicfile.Durable); err != nil {
		return fmt.Errorf("write image GC state: %w", err)
	}
	return nil
}
