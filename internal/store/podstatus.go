package store

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/minilet/minilet/internal/atomicfile"
)

// PodStatuses keeps each pod's last status on disk
// (<root-dir>/pods/<uid>/status.json) so a restarted agent starts from what
// it last published: start times, condition transition times and readiness
// survive, and readiness does not flap while probes catch up. Safe for
// concurrent use; writes of one pod must not race (its worker makes them).
type PodStatuses struct {
	dir string
	log *slog.Logger

	mu       sync.Mutex
	restored map[types.UID]v1.PodStatus // read at start, consumed on first use
	written  map[types.UID][]byte
}

// OpenPodStatuses reads the statuses a previous run saved under dir. A file
// that cannot be read is logged and skipped.
func OpenPodStatuses(dir string, log *slog.Logger) *PodStatuses {
	s := &PodStatuses{dir: dir, log: log, restored: map[types.UID]v1.PodStatus{}, written: map[types.UID][]byte{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return s
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name(), "status.json")
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var st v1.PodStatus
		if err := json.Unmarshal(b, &st); err != nil {
			log.Warn("ignoring an unreadable saved pod status", "path", path, "err", err)
			continue
		}
		s.restored[types.UID(e.Name())] = st
	}
	return s
}

// Restored returns the status a previous run saved for uid.
func (s *PodStatuses) Restored(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.restored[uid]
	return st, ok
}

// WasReady reports whether a container was ready when the last run saved
// its pod's status.
func (s *PodStatuses) WasReady(containerID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.restored {
		for _, c := range st.ContainerStatuses {
			if c.ContainerID == containerID {
				return c.Ready
			}
		}
	}
	return false
}

// WasStarted reports whether a container had started (passed its startup
// probe) when the last run saved its pod's status.
func (s *PodStatuses) WasStarted(containerID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.restored {
		for _, list := range [][]v1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
			for _, c := range list {
				if c.ContainerID == containerID {
					return c.Started != nil && *c.Started
				}
			}
		}
	}
	return false
}

// Save writes a pod's status when it changed since the last write.
func (s *PodStatuses) Save(uid types.UID, st v1.PodStatus) {
	b, err := json.Marshal(st)
	if err != nil {
		return
	}
	s.mu.Lock()
	same := string(s.written[uid]) == string(b)
	s.written[uid] = b
	s.mu.Unlock()
	if same {
		return
	}
	path := filepath.Join(s.dir, string(uid), "status.json")
	err = os.MkdirAll(filepath.Dir(path), 0o750)
	if err == nil {
		err = atomicfile.WriteFile(path, b, 0o640, atomicfile.Durable)
	}
	if err != nil {
		s.log.Warn("saving pod status failed", "uid", uid, "err", err)
	}
}

// Remove forgets a pod for good.
func (s *PodStatuses) Remove(uid types.UID) {
	s.mu.Lock()
	delete(s.restored, uid)
	delete(s.written, uid)
	s.mu.Unlock()
	err := os.Remove(filepath.Join(s.dir, string(uid), "status.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("removing saved pod status failed", "uid", uid, "err", err)
	}
}
