package store

import (
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactMinSize is the file size below which compaction is not worth it.
const compactMinSize = 1 << 20

// compactIfSparse rewrites the database into a fresh file when expired
// and capped events have left the file mostly free pages (bbolt reuses
// free pages but never shrinks its file). It runs at open, before anyone
// else uses db, and returns the database to use: the compacted one, or db
// itself when compaction was not needed or failed (with the error, for a
// warning).
func (s *Events) compactIfSparse(db *bolt.DB, timeout time.Duration) (*bolt.DB, error) {
	fi, err := os.Stat(s.path)
	if err != nil || fi.Size() < compactMinSize {
		return db, nil
	}
	var inuse int64
	if err := db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketEvents, bucketByTime} {
			st := tx.Bucket(name).Stats()
			inuse += int64(st.BranchInuse + st.LeafInuse + st.InlineBucketInuse)
		}
		return nil
	}); err != nil {
		return db, err
	}
	if fi.Size() <= 2*inuse+compactMinSize/2 {
		return db, nil
	}
	tmp := s.path + ".compact"
	_ = os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return db, fmt.Errorf("compact %s: %w", s.path, err)
	}
	if err := bolt.Compact(dst, db, 1<<20); err != nil {
		return db, errors.Join(fmt.Errorf("compact %s: %w", s.path, err), dst.Close(), os.Remove(tmp))
	}
	if err := dst.Close(); err != nil {
		return db, errors.Join(fmt.Errorf("compact %s: %w", s.path, err), os.Remove(tmp))
	}
	if err := db.Close(); err != nil {
		return db, fmt.Errorf("compact %s: close the old file: %w", s.path, err)
	}
	renameErr := os.Rename(tmp, s.path)
	reopened, err := bolt.Open(s.path, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("compact %s: reopen: %w", s.path, err)
	}
	if renameErr != nil {
		_ = os.Remove(tmp)
		return reopened, fmt.Errorf("compact %s: %w", s.path, renameErr)
	}
	after, _ := os.Stat(s.path)
	if after != nil {
		s.log.Info("compacted event store", "path", s.path, "bytesBefore", fi.Size(), "bytesAfter", after.Size())
	}
	return reopened, nil
}
