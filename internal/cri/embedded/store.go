package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/minilet/minilet/internal/atomicfile"
)

// writeJSONAtomic stores v at path durably and never torn.
func writeJSONAtomic(path string, v any) error {
	return atomicfile.WriteJSON(path, v, 0o600, atomicfile.Durable)
}

// writeJSONVolatile is writeJSONAtomic without fsync, for records that only
// matter while the machine stays up (a monitor's start and exit records: after
// a reboot their processes are gone anyway).
func writeJSONVolatile(path string, v any) error {
	return atomicfile.WriteJSON(path, v, 0o600, atomicfile.Volatile)
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
