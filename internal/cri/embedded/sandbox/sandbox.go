// Package sandbox keeps the embedded runtime's pod sandboxes: one durable
// record per sandbox (<dir>/<id>.json) with the pod's identity, log
// directory, cgroup parent, namespaces, network attachment and readiness.
// Sandboxes have no process of their own: their namespaces are held by
// bind mounts (package podns) and attached by CNI (package podnet).
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
	// IPs are all the pod's addresses (IP is the first); empty with the
	// host's network.
	IPs []string `json:"ips,omitempty"`
	// Hostname is the pod's hostname in its UTS namespace.
	Hostname string `json:"hostname,omitempty"`
	// Namespaces are the pod's own namespaces (kind → held path); a kind
	// absent is the host's.
	Namespaces map[string]string `json:"namespaces,omitempty"`
	// HostPID: the pod's containers share the host's PID namespace.
	HostPID bool `json:"hostPID,omitempty"`
	// PausePID and PauseStart (its start time in clock ticks) identify the
	// process holding a shared PID namespace; 0 when there is none.
	PausePID   int    `json:"pausePID,omitempty"`
	PauseStart uint64 `json:"pauseStart,omitempty"`
	// Attached: the pod may hold CNI state (IP, veth, rules). Set before
	// ADD, so that a crash during it still leads to a DEL; cleared after
	// DEL.
	Attached bool `json:"attached,omitempty"`
	// Network is the CNI network the pod is attached to, until detached
	// ("" while an ADD is under way: DEL then uses today's network).
	Network string `json:"network,omitempty"`
	// ResolvConf is the pod's resolv.conf, from its DNS config; "" keeps
	// the host's.
	ResolvConf string `json:"resolvConf,omitempty"`
	// Ports are the pod's host ports, which CNI DEL needs again.
	Ports     []Port `json:"ports,omitempty"`
	Ready     bool   `json:"ready"`
	CreatedAt int64  `json:"createdAt"`
}

// Port is one host port of a pod.
type Port struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
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

// Update changes the sandbox's record durably through change, which gets a
// copy; an unknown sandbox is NotFound.
func (s *Store) Update(id string, change func(*Record)) error {
	s.mu.Lock()
	rec, ok := s.records[id]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("pod sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	updated := *rec
	s.mu.Unlock()
	change(&updated)
	if err := s.save(&updated); err != nil {
		return err
	}
	s.mu.Lock()
	if _, ok := s.records[id]; ok {
		s.records[id] = &updated
	}
	s.mu.Unlock()
	return nil
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
