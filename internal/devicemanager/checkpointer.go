package devicemanager

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
)

// checkpointer persists snapshots of the manager's state in the
// background so that admission does not wait for the disk: a burst of
// changes becomes one write of the newest snapshot. Before a container
// starts, RunOptions waits until every change made so far is on disk, so
// no container ever runs with devices the checkpoint does not record.
type checkpointer struct {
	path string
	log  *slog.Logger

	writeMu sync.Mutex // one write at a time, newest snapshot last

	mu        sync.Mutex
	gen       uint64          // number of the newest snapshot
	pending   *checkpointData // newest snapshot not yet written, nil if none
	written   uint64          // newest snapshot on disk
	failedGen uint64          // newest snapshot whose write failed
	failErr   error
	progress  chan struct{} // closed and replaced after every write attempt
	running   bool          // a writer goroutine owns the writes
	kick      chan struct{} // wakes the writer (capacity 1)
	done      chan struct{}
}

func newCheckpointer(path string, log *slog.Logger) *checkpointer {
	return &checkpointer{path: path, log: log, progress: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// start runs the writer until ctx ends; it writes what is pending before
// returning. Stop waits for it with wait().
func (c *checkpointer) start(ctx context.Context) {
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	go func() {
		defer close(c.done)
		for {
			select {
			case <-ctx.Done():
				c.mu.Lock()
				c.running = false
				c.mu.Unlock()
				c.flush()
				return
			case <-c.kick:
				c.flush()
			}
		}
	}()
}

// stopped waits for the writer started by start to finish.
func (c *checkpointer) stopped() { <-c.done }

// submit queues data as the newest snapshot. Without a running writer
// (before Start, after Stop) it is written at once.
func (c *checkpointer) submit(data checkpointData) {
	c.mu.Lock()
	c.gen++
	c.pending = &data
	running := c.running
	c.mu.Unlock()
	if !running {
		c.flush()
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// flush writes the pending snapshot, if any.
func (c *checkpointer) flush() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	data, gen := c.pending, c.gen
	c.pending = nil
	c.mu.Unlock()
	if data == nil {
		return
	}
	err := c.write(*data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.log.Error("writing the device checkpoint failed", "path", c.path, "err", err)
		c.failedGen, c.failErr = max(c.failedGen, gen), err
		if c.pending == nil {
			// Nothing newer came meanwhile: keep the snapshot for a retry.
			c.pending = data
		}
	} else if gen > c.written {
		c.written = gen
	}
	close(c.progress)
	c.progress = make(chan struct{})
}

// persisted waits until every snapshot submitted so far is on disk, or
// fails when its write failed (after one more try, so that a passing disk
// error does not block container starts until the next device change) or
// timeout passed.
func (c *checkpointer) persisted(timeout time.Duration) error {
	c.mu.Lock()
	target := c.gen
	c.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	retried := false
	for {
		c.mu.Lock()
		written, failedGen, failErr, progress := c.written, c.failedGen, c.failErr, c.progress
		c.mu.Unlock()
		switch {
		case written >= target:
			return nil
		case failedGen >= target && !retried:
			retried = true
			c.flush() // writes the kept snapshot (or a newer one) again
			continue
		case failedGen >= target:
			return fmt.Errorf("device checkpoint %s: %v: %w", c.path, failErr, errdefs.ErrUnavailable)
		}
		select {
		case <-progress:
		case <-timer.C:
			return fmt.Errorf("device checkpoint %s not written within %v: %w", c.path, timeout, errdefs.ErrUnavailable)
		}
	}
}
