// Package sandbox keeps the embedded runtime's pod sandboxes: one durable
// record per sandbox (<dir>/<id>.json) with the pod's identity, log
// directory, cgroup parent, IP and readiness. Sandboxes have no process of
// their own; the pod network namespace and what attaches it (CNI, host
// ports) belong here as they come.
package sandbox

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/errdefs"
)

// Record is the durable state of a pod sandbox.
type Record struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Namespace      string            `json:"namespace"`
	UID            string            `json:"uid"`
	Attempt        uint32            `json:"attempt"`
	Labels         map[string]string `json:"labels,omitempty"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	LogDirectory   string            `json:"logDirectory,omitempty"`
	CgroupParent   string            `json:"cgroupParent,omitempty"`
	RuntimeHandler string            `json:"runtimeHandler,omitempty"`
	IP             string            `json:"ip"`
	Ready          bool              `json:"ready"`
	CreatedAt      int64             `json:"createdAt"`
}

// Store holds the sandboxes. It is safe for concurrent use; the records it
// returns are copies (their maps are never modified).
type Store struct {
	log *slog.Logger
	dir string

	mu      sync.Mutex
	records map[string]*Record
}

// Open loads the sandboxes recorded in dir (creating it); unreadable
// records are moved aside.
func Open(log *slog.Logger, dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create runtime state dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{log: log, dir: dir, records: map[string]*Record{}}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var rec Record
		if err := statefile.Read(path, &rec); err != nil || rec.ID == "" {
			statefile.Quarantine(log.Warn, path, err)
			continue
		}
		s.records[rec.ID] = &rec
	}
	return s, nil
}

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

func (s *Store) save(rec *Record) error {
	if err := statefile.Write(s.path(rec.ID), rec); err != nil {
		return fmt.Errorf("save sandbox %s: %w", rec.ID, err)
	}
	return nil
}

// Add records a new sandbox.
func (s *Store) Add(rec Record) error {
	if err := s.save(&rec); err != nil {
		return err
	}
	s.mu.Lock()
	s.records[rec.ID] = &rec
	s.mu.Unlock()
	return nil
}

// Get returns the sandbox id, or an error classified NotFound.
func (s *Store) Get(id string) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[id]
	if !ok {
		return Record{}, fmt.Errorf("pod sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return *rec, nil
}

// List returns every sandbox, in no particular order.
func (s *Store) List() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.records))
	for _, rec := range s.records {
		out = append(out, *rec)
	}
	return out
}

// SetNotReady marks the sandbox not ready, durably. It reports whether it
// was ready; an unknown sandbox is not an error.
func (s *Store) SetNotReady(id string) (bool, error) {
	s.mu.Lock()
	rec, ok := s.records[id]
	if !ok || !rec.Ready {
		s.mu.Unlock()
		return false, nil
	}
	updated := *rec
	updated.Ready = false
	s.mu.Unlock()
	if err := s.save(&updated); err != nil {
		return false, err
	}
	s.mu.Lock()
	if cur, ok := s.records[id]; ok {
		cur.Ready = false
	}
	s.mu.Unlock()
	return true, nil
}

// Remove deletes the sandbox's record; removing an unknown sandbox is not
// an error.
func (s *Store) Remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !os.IsNotExist(err) {
		return err
	}
	s.mu.Lock()
	delete(s.records, id)
	s.mu.Unlock()
	return nil
}
