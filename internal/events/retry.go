package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
)

// RetryConfig configures a RetryWriter. Zero values take client-go's
// defaults.
type RetryConfig struct {
	// MaxTries is how many times one event is attempted; default 12.
	MaxTries int
	// Interval is the sleep between attempts; the first sleep is a random
	// fraction of it so that agents do not retry in step after an API
	// server restart. Default 10s.
	Interval time.Duration
	// QueueSize bounds the events waiting to be written; default 1000.
	QueueSize int
}

// RetryStats counts what a RetryWriter did. After Shutdown,
// Queued == Written + GivenUp + Rejected + Abandoned.
type RetryStats struct {
	Queued    uint64 // accepted into the queue
	Dropped   uint64 // not accepted: queue full or writer shut down
	Written   uint64 // written by the next sink
	GivenUp   uint64 // failed MaxTries times
	Rejected  uint64 // failed with a permanent error (invalid, already exists)
	Abandoned uint64 // still unwritten when the shutdown deadline passed
}

// RetryWriter is a Sink that writes to a slower, fallible sink (the API
// server) from its own goroutine, so the broadcaster never waits on it.
// Failed writes are retried MaxTries times, Interval apart; permanent
// errors (errdefs.ErrInvalidArgument, errdefs.ErrAlreadyExists) are not
// retried, and an Update of an event the sink no longer has becomes a
// Create.
type RetryWriter struct {
	cfg   RetryConfig
	next  Sink
	clock clock.Clock
	log   *slog.Logger
	rand  func() float64
	queue chan retryItem

	mu     sync.RWMutex
	closed bool

	queued, dropped, written, givenUp, rejected, abandoned atomic.Uint64
	inBurst                                                atomic.Bool

	started   atomic.Bool
	startOnce sync.Once
	quitOnce  sync.Once
	quit      chan struct{}
	done      chan struct{}
	cancel    context.CancelFunc
}

type retryItem struct {
	ev     *v1.Event
	update bool
}

var _ Sink = (*RetryWriter)(nil)

// NewRetryWriter returns a writer to next; call Start to run it.
func NewRetryWriter(cfg RetryConfig, next Sink, clk clock.Clock, log *slog.Logger) (*RetryWriter, error) {
	if cfg.MaxTries == 0 {
		cfg.MaxTries = 12
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 1000
	}
	switch {
	case next == nil:
		return nil, fmt.Errorf("event retry writer: next sink is required: %w", errdefs.ErrInvalidArgument)
	case cfg.MaxTries < 0:
		return nil, fmt.Errorf("event retry writer: MaxTries %d must be positive: %w", cfg.MaxTries, errdefs.ErrInvalidArgument)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("event retry writer: Interval %s must be positive: %w", cfg.Interval, errdefs.ErrInvalidArgument)
	case cfg.QueueSize < 0:
		return nil, fmt.Errorf("event retry writer: QueueSize %d must be positive: %w", cfg.QueueSize, errdefs.ErrInvalidArgument)
	}
	return &RetryWriter{
		cfg: cfg, next: next, clock: clk, rand: rand.Float64,
		log:   log.With("component", "events-writer"),
		queue: make(chan retryItem, cfg.QueueSize),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}, nil
}

// Create implements Sink: ev is queued and written later.
func (w *RetryWriter) Create(_ context.Context, ev *v1.Event) (*v1.Event, error) {
	w.enqueue(retryItem{ev: ev})
	return ev, nil
}

// Update implements Sink: ev is queued and written later.
func (w *RetryWriter) Update(_ context.Context, ev *v1.Event) (*v1.Event, error) {
	w.enqueue(retryItem{ev: ev, update: true})
	return ev, nil
}

func (w *RetryWriter) enqueue(it retryItem) {
	w.mu.RLock()
	if !w.closed {
		select {
		case w.queue <- it:
			w.queued.Add(1)
			w.mu.RUnlock()
			return
		default:
		}
	}
	w.mu.RUnlock()
	w.dropped.Add(1)
	if w.inBurst.CompareAndSwap(false, true) {
		w.log.Warn("event writer queue full or closed, dropping events", "queueSize", cap(w.queue))
	}
}

// Start runs the writer's goroutine; cancelling ctx ends it like Shutdown
// without a deadline. Calling Start again does nothing.
func (w *RetryWriter) Start(ctx context.Context) {
	w.startOnce.Do(func() {
		sinkCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		w.cancel = cancel
		w.started.Store(true)
		go w.run(ctx, sinkCtx)
	})
}

func (w *RetryWriter) run(ctx, sinkCtx context.Context) {
	defer close(w.done)
	defer w.cancel()
	for {
		select {
		case it := <-w.queue:
			if sinkCtx.Err() != nil { // the shutdown deadline passed
				w.abandoned.Add(1)
				continue
			}
			w.write(sinkCtx, it.ev, it.update)
			if len(w.queue) == 0 {
				w.inBurst.Store(false)
			}
		case <-w.quit:
			w.drain(sinkCtx)
			return
		case <-ctx.Done():
			w.close()
			w.drain(sinkCtx)
			return
		}
	}
}

func (w *RetryWriter) drain(ctx context.Context) {
	for {
		select {
		case it := <-w.queue:
			if ctx.Err() != nil {
				w.abandoned.Add(1)
				continue
			}
			w.write(ctx, it.ev, it.update)
		default:
			return
		}
	}
}

// write makes up to MaxTries attempts to write ev and reports whether it
// was written. It sleeps on the injected clock between attempts.
func (w *RetryWriter) write(ctx context.Context, ev *v1.Event, update bool) bool {
	for tries := 1; ; tries++ {
		err := w.attempt(ctx, ev, update)
		switch {
		case err == nil:
			w.written.Add(1)
			return true
		case errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, errdefs.ErrAlreadyExists):
			w.rejected.Add(1)
			w.log.Warn("event rejected, not retrying", "event", ev.Namespace+"/"+ev.Name, "reason", ev.Reason, "err", err)
			return false
		case tries >= w.cfg.MaxTries:
			w.givenUp.Add(1)
			w.log.Error("cannot write event, giving up", "event", ev.Namespace+"/"+ev.Name, "reason", ev.Reason, "tries", tries, "err", err)
			return false
		}
		delay := w.cfg.Interval
		if tries == 1 {
			delay = time.Duration(float64(delay) * w.rand())
		}
		w.log.Debug("cannot write event, will retry", "event", ev.Namespace+"/"+ev.Name, "tries", tries, "retryIn", delay, "err", err)
		select {
		case <-ctx.Done():
			w.abandoned.Add(1)
			return false
		case <-w.clock.After(delay):
		}
	}
}

func (w *RetryWriter) attempt(ctx context.Context, ev *v1.Event, update bool) error {
	if update {
		_, err := w.next.Update(ctx, ev)
		if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	_, err := w.next.Create(ctx, ev)
	return err
}

func (w *RetryWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// Shutdown stops accepting events and writes (with retries) what is
// queued. When ctx ends first the rest is abandoned, counted, and ctx's
// error returned. Safe to call more than once.
func (w *RetryWriter) Shutdown(ctx context.Context) error {
	w.close()
	w.quitOnce.Do(func() { close(w.quit) })
	if !w.started.Load() {
		w.startOnce.Do(func() {
			close(w.done)
			for {
				select {
				case <-w.queue:
					w.abandoned.Add(1)
					continue
				default:
				}
				break
			}
		})
	}
	select {
	case <-w.done:
		return nil
	default:
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
	}
	if w.cancel != nil {
		w.cancel()
	}
	<-w.done
	return fmt.Errorf("event writer: shutdown deadline passed with events unwritten (%d abandoned): %w", w.abandoned.Load(), ctx.Err())
}

// Stop is Shutdown without a deadline.
func (w *RetryWriter) Stop() { _ = w.Shutdown(context.Background()) }

// Stats returns the writer's counters.
func (w *RetryWriter) Stats() RetryStats {
	return RetryStats{
		Queued: w.queued.Load(), Dropped: w.dropped.Load(), Written: w.written.Load(),
		GivenUp: w.givenUp.Load(), Rejected: w.rejected.Load(), Abandoned: w.abandoned.Load(),
	}
}
