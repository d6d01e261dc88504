// Package store is minilet's embedded local state: a bbolt database under
// the root directory. Events live in events.db with a TTL and a size cap,
// the file is compacted at open when purges left it mostly empty, and a
// damaged file is moved aside and a fresh one started, never a crash.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
)

// EventsFile is the event database's file name under EventsConfig.Dir.
const EventsFile = "events.db"

var (
	bucketEvents = []byte("events") // "ns/name" -> 8-byte lastTimestamp (unix nanos, big endian) + protobuf v1.Event
	bucketByTime = []byte("bytime") // 8-byte lastTimestamp + "ns/name" -> nil; oldest first
)

// EventsConfig configures the event store. Zero values take the defaults.
type EventsConfig struct {
	// Dir holds events.db; required (the agent passes its root dir).
	Dir string
	// TTL is how long an event is kept after its lastTimestamp; default 1h,
	// like the API server's --event-ttl.
	TTL time.Duration
	// MaxEvents caps the stored events; the oldest go first. Default 10000.
	MaxEvents int
	// OpenTimeout is how long Open waits for another process's lock on the
	// file; default 1s.
	OpenTimeout time.Duration
	// PurgeInterval is how often a write also purges expired events;
	// default 1m.
	PurgeInterval time.Duration
}

// Events stores v1.Events keyed by namespace/name. It is safe for
// concurrent use.
type Events struct {
	cfg   EventsConfig
	path  string
	clock clock.PassiveClock
	log   *slog.Logger
	db    *bolt.DB

	mu        sync.Mutex // serialises writers with count and lastPurge
	count     int
	lastPurge time.Time
	closed    bool
}

// OpenEvents opens (or creates) Dir/events.db. A file that bbolt cannot
// read is renamed to events.db.corrupt-<UTC time> with a warning and a new
// store is started. A file locked by another process is an
// errdefs.ErrUnavailable error after OpenTimeout.
func OpenEvents(cfg EventsConfig, clk clock.PassiveClock, log *slog.Logger) (*Events, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("event store: Dir is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Hour
	}
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = 10000
	}
	if cfg.OpenTimeout == 0 {
		cfg.OpenTimeout = time.Second
	}
	if cfg.PurgeInterval == 0 {
		cfg.PurgeInterval = time.Minute
	}
	switch {
	case cfg.TTL < 0:
		return nil, fmt.Errorf("event store: TTL %s must be positive: %w", cfg.TTL, errdefs.ErrInvalidArgument)
	case cfg.MaxEvents < 0:
		return nil, fmt.Errorf("event store: MaxEvents %d must be positive: %w", cfg.MaxEvents, errdefs.ErrInvalidArgument)
	case cfg.OpenTimeout < 0:
		return nil, fmt.Errorf("event store: OpenTimeout %s must be positive: %w", cfg.OpenTimeout, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("event store: create %s: %w", cfg.Dir, err)
	}
	s := &Events{cfg: cfg, path: filepath.Join(cfg.Dir, EventsFile), clock: clk, log: log.With("component", "event-store")}
	db, count, err := openChecked(s.path, cfg.OpenTimeout)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("event store %s is locked by another process (waited %s): %w", s.path, cfg.OpenTimeout, errdefs.ErrUnavailable)
	}
	if err != nil {
		aside := fmt.Sprintf("%s.corrupt-%s", s.path, clk.Now().UTC().Format("20060102T150405.000000000Z"))
		if rerr := os.Rename(s.path, aside); rerr != nil {
			return nil, fmt.Errorf("event store %s is unreadable (%v) and cannot be moved aside: %w", s.path, err, rerr)
		}
		s.log.Warn("event store unreadable, moved aside and starting a new one", "path", s.path, "movedTo", aside, "err", err)
		db, count, err = openChecked(s.path, cfg.OpenTimeout)
		if err != nil {
			return nil, fmt.Errorf("event store %s: create after moving the damaged file aside: %w", s.path, err)
		}
	}
	s.db, s.count = db, count
	if _, err := s.Purge(); err != nil {
		s.log.Warn("purging expired events failed", "err", err)
	}
	db, err = s.compactIfSparse(s.db, cfg.OpenTimeout)
	if db == nil {
		return nil, fmt.Errorf("event store: %w", err)
	}
	if err != nil {
		s.log.Warn("compacting the event store failed; continuing with the uncompacted file", "err", err)
	}
	s.db = db
	return s, nil
}

// openChecked opens path, checks its consistency and creates the buckets.
// bbolt may panic or fault on a damaged file, so those become errors.
func openChecked(path string, timeout time.Duration) (db *bolt.DB, count int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("damaged database: %v", r)
			if db != nil {
				_ = db.Close()
				db = nil
			}
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return nil, 0, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			return fmt.Errorf("damaged database: %w", cerr)
		}
		eb, err := tx.CreateBucketIfNotExists(bucketEvents)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketByTime); err != nil {
			return err
		}
		// Decode every event once: a file bbolt accepts may still hold
		// garbage.
		return eb.ForEach(func(k, v []byte) error {
			count++
			if len(v) < 8 {
				return fmt.Errorf("damaged event record %q", k)
			}
			var ev v1.Event
			if err := ev.Unmarshal(v[8:]); err != nil {
				return fmt.Errorf("damaged event record %q: %w", k, err)
			}
			return nil
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, 0, err
	}
	return db, count, nil
}

// Len is the number of stored events.
func (s *Events) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Put stores ev, replacing the event of the same namespace and name.
func (s *Events) Put(ev *v1.Event) error { return s.PutEvents([]*v1.Event{ev}) }

// PutEvents stores evs in one transaction (later ones win on equal
// names), then drops the oldest events beyond MaxEvents and, at most every
// PurgeInterval, the expired ones.
func (s *Events) PutEvents(evs []*v1.Event) error {
	for _, ev := range evs {
		if ev == nil || ev.Name == "" {
			return fmt.Errorf("event store: event without a name: %w", errdefs.ErrInvalidArgument)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	added := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		eb, tb := tx.Bucket(bucketEvents), tx.Bucket(bucketByTime)
		for _, ev := range evs {
			key := []byte(ev.Namespace + "/" + ev.Name)
			if old := eb.Get(key); len(old) >= 8 {
				if err := tb.Delete(timeKey(old[:8], key)); err != nil {
					return err
				}
			} else {
				added++
			}
			data, err := ev.Marshal()
			if err != nil {
				return fmt.Errorf("encode event %s: %w", key, err)
			}
			ts := make([]byte, 8, 8+len(data))
			binary.BigEndian.PutUint64(ts, uint64(eventTime(ev).UnixNano()))
			if err := eb.Put(key, append(ts, data...)); err != nil {
				return err
			}
			if err := tb.Put(timeKey(ts, key), nil); err != nil {
				return err
			}
		}
		if over := s.count + added - s.cfg.MaxEvents; over > 0 {
			n, err := deleteOldest(eb, tb, func(_ int64, i int) bool { return i < over })
			added -= n
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("event store: write %d events: %w", len(evs), err)
	}
	s.count += added
	if now := s.clock.Now(); now.Sub(s.lastPurge) >= s.cfg.PurgeInterval {
		if _, err := s.purgeLocked(now); err != nil {
			return err
		}
	}
	return nil
}

// Purge deletes events whose lastTimestamp is older than the TTL and
// returns how many it deleted.
func (s *Events) Purge() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.purgeLocked(s.clock.Now())
}

func (s *Events) purgeLocked(now time.Time) (int, error) {
	cutoff := now.Add(-s.cfg.TTL).UnixNano()
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		n, err = deleteOldest(tx.Bucket(bucketEvents), tx.Bucket(bucketByTime),
			func(ts int64, _ int) bool { return ts < cutoff })
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("event store: purge expired events: %w", err)
	}
	s.count -= n
	s.lastPurge = now
	return n, nil
}

// deleteOldest deletes events oldest first while more(timestamp, index)
// holds.
func deleteOldest(eb, tb *bolt.Bucket, more func(ts int64, i int) bool) (int, error) {
	var doomed [][]byte
	c := tb.Cursor()
	for k, _ := c.First(); len(k) >= 8 && more(int64(binary.BigEndian.Uint64(k[:8])), len(doomed)); k, _ = c.Next() {
		doomed = append(doomed, append([]byte(nil), k...))
	}
	for _, k := range doomed {
		if err := tb.Delete(k); err != nil {
			return 0, err
		}
		if err := eb.Delete(k[8:]); err != nil {
			return 0, err
		}
	}
	return len(doomed), nil
}

// List returns the unexpired events about the object namespace/name (its
// involvedObject); an empty name means every object in the namespace, and
// both empty mean all events. Order is unspecified (the CLI sorts by
// when an event was last seen).
func (s *Events) List(namespace, name string) ([]v1.Event, error) {
	cutoff := s.clock.Now().Add(-s.cfg.TTL).UnixNano()
	var out []v1.Event
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
			if len(v) < 8 || int64(binary.BigEndian.Uint64(v[:8])) < cutoff {
				return nil
			}
			var ev v1.Event
			if err := ev.Unmarshal(v[8:]); err != nil {
				s.log.Warn("skipping undecodable stored event", "key", string(k), "err", err)
				return nil
			}
			if namespace != "" || name != "" {
				if ev.InvolvedObject.Namespace != namespace || (name != "" && ev.InvolvedObject.Name != name) {
					return nil
				}
			}
			out = append(out, ev)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("event store: list: %w", err)
	}
	return out, nil
}

// Close closes the database; safe to call more than once.
func (s *Events) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.db.Close()
}

func timeKey(ts, key []byte) []byte {
	k := make([]byte, 0, len(ts)+len(key))
	return append(append(k, ts...), key...)
}

// eventTime is the time an event's TTL runs from.
func eventTime(ev *v1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	default:
		return ev.FirstTimestamp.Time
	}
}
