package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
)

// Config configures a Broadcaster. Zero values take the defaults.
type Config struct {
	// QueueSize bounds the events waiting for the broadcaster's goroutine;
	// when it is full Record drops (and counts) the event. Default 1000,
	// like client-go.
	QueueSize int
	// Correlator tunes aggregation, dedup and the spam filter.
	Correlator CorrelatorConfig
	// Registerer, when set, gets the minilet_events_* counters.
	Registerer prometheus.Registerer
}

// Stats counts what happened to recorded events. Once the broadcaster has
// shut down, Recorded == Dropped + Filtered + Delivered exactly.
type Stats struct {
	Recorded   uint64 // events handed to Record
	Dropped    uint64 // lost: queue full, recorded after shutdown, or unflushed at the shutdown deadline
	Filtered   uint64 // eaten by the spam filter
	Delivered  uint64 // handed to the sinks (after aggregation and dedup)
	SinkErrors uint64 // sink calls that returned an error
}

// Sink receives correlated events. Create is for a new event; Update for a
// repeat of an event already written under the same name (Count > 1).
// Sinks run on the broadcaster's goroutine: they must be quick (or queue
// the work, like RetryWriter) and must not modify the event.
type Sink interface {
	Create(ctx context.Context, ev *v1.Event) (*v1.Event, error)
	Update(ctx context.Context, ev *v1.Event) (*v1.Event, error)
}

// Flusher is implemented by sinks that buffer; the broadcaster calls Flush
// whenever its queue runs empty and at shutdown.
type Flusher interface {
	Flush(ctx context.Context) error
}

// Broadcaster takes events from recorders without ever blocking them and
// fans them out to its sinks from one goroutine. Events are correlated on
// the recorder's side of the queue (a short critical section, no I/O), so
// duplicates and spam never occupy the queue and a burst of one noisy
// event cannot push out the others.
type Broadcaster struct {
	clock clock.Clock
	log   *slog.Logger
	corr  *Correlator
	queue chan queued

	mu     sync.RWMutex // Record holds it shared while sending; Shutdown exclusively to close
	closed bool

	sinksMu sync.Mutex
	sinks   atomic.Pointer[[]Sink] // copy on write

	recorded, dropped, filtered, delivered, sinkErrors atomic.Uint64
	inBurst                                            atomic.Bool
	droppedMetric, deliveredMetric, filteredMetric     prometheus.Counter

	started   atomic.Bool
	startOnce sync.Once
	quitOnce  sync.Once
	quit      chan struct{}
	done      chan struct{}
	cancel    context.CancelFunc // cancels the sinks' context at the shutdown deadline
}

// NewBroadcaster returns a broadcaster; call Start to run it and Shutdown
// (or Stop) to flush and end it.
func NewBroadcaster(cfg Config, clk clock.Clock, log *slog.Logger) (*Broadcaster, error) {
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 1000
	}
	if cfg.QueueSize < 0 {
		return nil, fmt.Errorf("events broadcaster: QueueSize %d must be positive: %w", cfg.QueueSize, errdefs.ErrInvalidArgument)
	}
	corr, err := NewCorrelator(cfg.Correlator, clk)
	if err != nil {
		return nil, err
	}
	b := &Broadcaster{
		clock: clk,
		log:   log.With("component", "events"),
		corr:  corr,
		queue: make(chan queued, cfg.QueueSize),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	b.sinks.Store(&[]Sink{})
	b.droppedMetric = newCounter(cfg.Registerer, "minilet_events_dropped_total",
		"Events lost before reaching any sink (queue full or shutdown).")
	b.deliveredMetric = newCounter(cfg.Registerer, "minilet_events_delivered_total",
		"Events handed to the sinks after correlation.")
	b.filteredMetric = newCounter(cfg.Registerer, "minilet_events_filtered_total",
		"Events eaten by the spam filter.")
	return b, nil
}

func newCounter(reg prometheus.Registerer, name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(prometheus.Counter); ok {
				return existing
			}
		}
	}
	return c
}

// AddSink adds a sink; the returned func removes it again.
func (b *Broadcaster) AddSink(s Sink) (remove func()) {
	b.sinksMu.Lock()
	defer b.sinksMu.Unlock()
	old := *b.sinks.Load()
	next := append(append(make([]Sink, 0, len(old)+1), old...), s)
	b.sinks.Store(&next)
	return func() {
		b.sinksMu.Lock()
		defer b.sinksMu.Unlock()
		cur := *b.sinks.Load()
		kept := make([]Sink, 0, len(cur))
		for _, x := range cur {
			if x != s {
				kept = append(kept, x)
			}
		}
		b.sinks.Store(&kept)
	}
}

// queued is one correlated event waiting for the sinks.
type queued struct {
	ev     *v1.Event
	update bool
}

// enqueue counts the event as recorded and queues it or drops it.
func (b *Broadcaster) enqueue(q queued) bool {
	b.recorded.Add(1)
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		b.drop(1)
		return false
	}
	select {
	case b.queue <- q:
		b.mu.RUnlock()
		if len(b.queue) > cap(b.queue)/2 {
			// Not a wait: give the fan-out goroutine, which this send may
			// have woken onto our processor, a chance to run before the
			// queue overflows.
			runtime.Gosched()
		}
		return true
	default:
	}
	b.mu.RUnlock()
	b.drop(1)
	b.warnBurst()
	return false
}

// admit counts an event recorded after shutdown as dropped and returns
// false; it spares such events the correlator.
func (b *Broadcaster) admit() bool {
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		b.recorded.Add(1)
		b.drop(1)
		return false
	}
	return true
}

func (b *Broadcaster) warnBurst() {
	if b.inBurst.CompareAndSwap(false, true) {
		b.log.Warn("event queue full, dropping events until it drains", "queueSize", cap(b.queue))
	}
}

func (b *Broadcaster) filter() {
	b.filtered.Add(1)
	b.filteredMetric.Inc()
}

func (b *Broadcaster) drop(n uint64) {
	b.dropped.Add(n)
	b.droppedMetric.Add(float64(n))
}

// Start runs the fan-out goroutine. Cancelling ctx ends it like Shutdown
// without a deadline. Calling Start again does nothing.
func (b *Broadcaster) Start(ctx context.Context) {
	b.startOnce.Do(func() {
		sinkCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		b.cancel = cancel
		b.started.Store(true)
		go b.run(ctx, sinkCtx)
	})
}

func (b *Broadcaster) run(ctx, sinkCtx context.Context) {
	defer close(b.done)
	defer b.cancel()
	for {
		select {
		case q := <-b.queue:
			if sinkCtx.Err() != nil { // the shutdown deadline passed
				b.drop(1)
				continue
			}
			b.handle(sinkCtx, q)
			if len(b.queue) == 0 {
				b.flush(sinkCtx)
				if b.inBurst.CompareAndSwap(true, false) {
					b.log.Warn("event queue drained", "droppedTotal", b.dropped.Load())
				}
			}
		case <-b.quit:
			b.drain(sinkCtx)
			return
		case <-ctx.Done():
			b.close()
			b.drain(sinkCtx)
			return
		}
	}
}

// drain writes what is queued (nothing more can arrive: the broadcaster is
// closed), or counts it as dropped once the sinks' context is cancelled.
func (b *Broadcaster) drain(ctx context.Context) {
	for {
		select {
		case q := <-b.queue:
			if ctx.Err() != nil {
				b.drop(1)
				continue
			}
			b.handle(ctx, q)
		default:
			b.flush(ctx)
			return
		}
	}
}

// handle hands one correlated event to every sink.
func (b *Broadcaster) handle(ctx context.Context, q queued) {
	b.delivered.Add(1)
	b.deliveredMetric.Inc()
	for _, s := range *b.sinks.Load() {
		var err error
		if q.update {
			_, err = s.Update(ctx, q.ev)
		} else {
			_, err = s.Create(ctx, q.ev)
		}
		if err != nil {
			b.sinkErrors.Add(1)
			b.log.Warn("event sink failed", "sink", fmt.Sprintf("%T", s), "event", q.ev.Namespace+"/"+q.ev.Name, "reason", q.ev.Reason, "err", err)
		}
	}
}

func (b *Broadcaster) flush(ctx context.Context) {
	for _, s := range *b.sinks.Load() {
		if f, ok := s.(Flusher); ok {
			if err := f.Flush(ctx); err != nil {
				b.sinkErrors.Add(1)
				b.log.Warn("event sink flush failed", "sink", fmt.Sprintf("%T", s), "err", err)
			}
		}
	}
}

// close stops Record from queueing; afterwards it drops and counts.
func (b *Broadcaster) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// Shutdown stops accepting events and writes what is queued to the sinks.
// If ctx ends first, the sinks' context is cancelled, what is left is
// counted as dropped, and ctx's error returned. Safe to call more than
// once and concurrently; each call waits for the goroutine to end.
func (b *Broadcaster) Shutdown(ctx context.Context) error {
	b.close()
	b.quitOnce.Do(func() { close(b.quit) })
	if !b.started.Load() {
		// Never started: nothing will write what is queued.
		b.startOnce.Do(func() {
			close(b.done)
			b.drainUnstarted()
		})
	}
	select {
	case <-b.done:
		return nil
	default:
	}
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
	}
	if b.cancel != nil {
		b.cancel()
	}
	<-b.done
	return fmt.Errorf("events: shutdown deadline passed before all queued events were written (%d dropped in total): %w",
		b.dropped.Load(), ctx.Err())
}

func (b *Broadcaster) drainUnstarted() {
	for {
		select {
		case <-b.queue:
			b.drop(1)
		default:
			return
		}
	}
}

// Stop is Shutdown without a deadline.
func (b *Broadcaster) Stop() { _ = b.Shutdown(context.Background()) }

// Stats returns the counters; see Stats for the invariant.
func (b *Broadcaster) Stats() Stats {
	return Stats{
		Recorded:   b.recorded.Load(),
		Dropped:    b.dropped.Load(),
		Filtered:   b.filtered.Load(),
		Delivered:  b.delivered.Load(),
		SinkErrors: b.sinkErrors.Load(),
	}
}

// Dropped is the number of events lost before reaching the sinks.
func (b *Broadcaster) Dropped() uint64 { return b.dropped.Load() }
