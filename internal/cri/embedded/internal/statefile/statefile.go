// Package statefile reads and writes the embedded runtime's JSON state
// files: sandbox, container and image records, and the monitor's spec,
// start and exit records. Writes never tear (internal/atomicfile); a file
// that exists but cannot be decoded is reported as ErrCorrupt and can be
// moved aside. It uses only the standard library, for the monitor binary.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/minilet/minilet/internal/atomicfile"
)

// Write stores v at path durably and never torn.
func Write(path string, v any) error {
	return atomicfile.WriteJSON(path, v, 0o600, atomicfile.Durable)
}

// WriteVolatile is Write without fsync, for records that only matter while
// the machine stays up (a monitor's start and exit records: after a reboot
// their processes are gone anyway).
func WriteVolatile(path string, v any) error {
	return atomicfile.WriteJSON(path, v, 0o600, atomicfile.Volatile)
}

// ErrCorrupt marks a state file that exists but cannot be decoded.
var ErrCorrupt = errors.New("corrupt state file")

// Read decodes path into v. A missing file returns an error satisfying
// os.IsNotExist; an undecodable one returns ErrCorrupt.
func Read(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return nil
}

// Quarantine moves a corrupt state file aside so that the next start does
// not trip over it again, and says so through warn (a slog.Logger's Warn).
func Quarantine(warn func(msg string, args ...any), path string, cause error) {
	dst := fmt.Sprintf("%s.corrupt-%d", path, time.Now().UnixNano())
	if err := os.Rename(path, dst); err != nil {
		warn("cannot move corrupt state file aside", "path", path, "err", err)
		return
	}
	warn("moved corrupt state file aside", "path", path, "movedTo", dst, "cause", cause)
}
