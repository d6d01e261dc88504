package events

import (
	"context"
	"log/slog"
	"sync"

	v1 "k8s.io/api/core/v1"
)

// LogSink writes every event to a structured log: Warning events at Warn,
// Normal events at Info.
type LogSink struct{ log *slog.Logger }

var _ Sink = (*LogSink)(nil)

// NewLogSink returns a sink logging to log.
func NewLogSink(log *slog.Logger) *LogSink {
	return &LogSink{log: log.With("component", "events")}
}

// Create implements Sink.
func (s *LogSink) Create(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	s.write(ctx, ev)
	return ev, nil
}

// Update implements Sink.
func (s *LogSink) Update(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	s.write(ctx, ev)
	return ev, nil
}

func (s *LogSink) write(ctx context.Context, ev *v1.Event) {
	level := slog.LevelInfo
	if ev.Type == v1.EventTypeWarning {
		level = slog.LevelWarn
	}
	o := &ev.InvolvedObject
	s.log.Log(ctx, level, "event",
		"type", ev.Type, "reason", ev.Reason,
		"object", o.Kind+"/"+o.Namespace+"/"+o.Name, "fieldPath", o.FieldPath,
		"message", ev.Message, "count", ev.Count)
}

// EventWriter is what StoreSink needs from the local store
// (*store.Events implements it).
type EventWriter interface {
	PutEvents(evs []*v1.Event) error
}

// StoreSink buffers events and writes them to the local store in one
// transaction when the broadcaster's queue runs empty (or every
// storeBatch events), so a burst costs a few disk syncs, not one per event.
type StoreSink struct {
	w       EventWriter
	mu      sync.Mutex
	pending []*v1.Event
}

const storeBatch = 256

var (
	_ Sink    = (*StoreSink)(nil)
	_ Flusher = (*StoreSink)(nil)
)

// NewStoreSink returns a sink writing to w.
func NewStoreSink(w EventWriter) *StoreSink {
	return &StoreSink{w: w, pending: make([]*v1.Event, 0, storeBatch)}
}

// Create implements Sink; the event is written at the next Flush.
func (s *StoreSink) Create(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	return ev, s.add(ctx, ev)
}

// Update implements Sink: the stored event of the same name is replaced.
func (s *StoreSink) Update(ctx context.Context, ev *v1.Event) (*v1.Event, error) {
	return ev, s.add(ctx, ev)
}

func (s *StoreSink) add(ctx context.Context, ev *v1.Event) error {
	s.mu.Lock()
	s.pending = append(s.pending, ev)
	full := len(s.pending) >= storeBatch
	s.mu.Unlock()
	if full {
		return s.Flush(ctx)
	}
	return nil
}

// Flush implements Flusher. On error the batch is discarded (events are
// best effort) and the error returned for the broadcaster to log.
func (s *StoreSink) Flush(context.Context) error {
	s.mu.Lock()
	batch := s.pending
	s.pending = make([]*v1.Event, 0, storeBatch)
	s.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	return s.w.PutEvents(batch)
}
