package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/store"
)

// eventPipeline is the recorder every component records with, the
// broadcaster behind it (correlator, sinks) and the local event store.
type eventPipeline struct {
	recorder    events.Recorder
	broadcaster *events.Broadcaster
	store       *store.Events
}

// newEvents opens the event store under the root dir and starts the
// broadcaster with a log sink and a store sink.
func newEvents(ctx context.Context, cfg *config.Config, reg prometheus.Registerer, clk clock.WithTicker, log *slog.Logger) (*eventPipeline, error) {
	st, err := store.OpenEvents(store.EventsConfig{Dir: cfg.RootDir}, clk, log)
	if err != nil {
		return nil, fmt.Errorf("opening the event store under --root-dir %s: %w", cfg.RootDir, err)
	}
	b, err := events.NewBroadcaster(eventsConfig(cfg, reg), clk, log)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	b.AddSink(events.NewLogSink(log))
	b.AddSink(events.NewStoreSink(st))
	b.Start(ctx)
	return &eventPipeline{
		recorder:    b.NewRecorder(v1.EventSource{Component: events.Component, Host: cfg.NodeName}),
		broadcaster: b,
		store:       st,
	}, nil
}

// eventsConfig is the broadcaster's configuration from the agent's.
func eventsConfig(cfg *config.Config, reg prometheus.Registerer) events.Config {
	return events.Config{
		Correlator: events.CorrelatorConfig{SpamKeyPerReason: cfg.EventSpamKeyPerReason},
		Registerer: reg,
	}
}

// close flushes what is queued (for at most 5 s) and closes the store.
func (e *eventPipeline) close(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.broadcaster.Shutdown(ctx); err != nil {
		log.Warn("event flush incomplete", "err", err)
	}
	if err := e.store.Close(); err != nil {
		log.Warn("closing the event store", "err", err)
	}
}

// nodeObject is the object events about the node (and about manifests
// that are not pods) are recorded on.
func nodeObject(name string) *v1.Node {
	n := &v1.Node{}
	n.Name = name
	n.UID = types.UID(name)
	return n
}
