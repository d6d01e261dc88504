package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// writeJSONAtomic stores v at path so that readers see either the old or the
// new content, never a torn write: temp file in the same directory, fsync,
// rename.
func writeJSONAtomic(path string, v any) error { return writeJSON(path, v, true) }

// writeJSONVolatile is writeJSONAtomic without fsync, for records that only
// matter while the machine stays up (a monitor's start and exit records: after
// a reboot their processes are gone anyway). Still never torn.
func writeJSONVolatile(path string, v any) error { return writeJSON(path, v, false) }

func writeJSON(path string, v any, durable bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmpName)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncIf(durable, tmp); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmpName)
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmpName)
		return err
	}
	if err := os.Rename(tmpName, path); err != nil {
		_ = os.Remove(tmpName)
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return nil
}

// errCorrupt marks a state file that exists but cannot be decoded.
var errCorrupt = errors.New("corrupt state file")

// readJSON decodes path into v. A missing file returns an error satisfying
// os.IsNotExist; an undecodable one returns errCorrupt.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s: %v", errCorrupt, path, err)
	}
	return nil
}

// quarantine moves a corrupt state file aside so that the next start does not
// trip over it again, and says so in the log.
func quarantine(log *slog.Logger, path string, cause error) {
	dst := fmt.Sprintf("%s.corrupt-%d", path, time.Now().UnixNano())
	if err := os.Rename(path, dst); err != nil {
		log.Warn("cannot move corrupt state file aside", "path", path, "err", err)
		return
	}
	log.Warn("moved corrupt state file aside", "path", path, "movedTo", dst, "cause", cause)
}

func syncIf(durable bool, f *os.File) error {
	if !durable {
		return nil
	}
	return f.Sync()
}
