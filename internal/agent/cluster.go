package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/cluster"
	"github.com/minilet/minilet/internal/config"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/lifecycle"
	"github.com/minilet/minilet/internal/nodecert"
	"github.com/minilet/minilet/internal/objects"
	"github.com/minilet/minilet/internal/volumes"
)

// clusterLink is minilet's connection to the API server (--kubeconfig):
// the client, which also sources pods and runs the node loop once
// started, and the publisher of pod statuses.
type clusterLink struct {
	cluster   *cluster.Cluster
	publisher *cluster.Publisher
	creds     *nodecert.Client
}

// newClusterLink builds the API clients named by --kubeconfig and adds the
// API server as an event sink; nil without --kubeconfig (standalone).
// With --bootstrap-kubeconfig and no usable --kubeconfig it first waits
// for a client certificate (TLS bootstrapping); with rotateCertificates
// it keeps renewing it. Otherwise nothing is contacted until the cluster
// is started.
func newClusterLink(ctx context.Context, bg *background, cfg *config.Config, clk clock.WithTicker, log *slog.Logger, ev *eventPipeline) (*clusterLink, error) {
	if cfg.Kubeconfig == "" {
		return nil, nil
	}
	creds, err := nodecert.NewClient(ctx, nodecert.ClientConfig{
		Kubeconfig:          cfg.Kubeconfig,
		BootstrapKubeconfig: cfg.BootstrapKubeconfig,
		CertDir:             cfg.CertDir,
		NodeName:            cfg.NodeName,
		Rotate:              cfg.RotateCertificates,
		Logger:              log,
	})
	if err != nil {
		return nil, fmt.Errorf("the node's API credentials: %w", err)
	}
	bg.run(creds.Run)
	c, err := cluster.New(cluster.Config{
		Kubeconfig:                cfg.Kubeconfig,
		REST:                      creds.REST,
		NodeName:                  cfg.NodeName,
		NodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency,
		NodeStatusReportFrequency: cfg.NodeStatusReportFrequency,
		EventQPS:                  float32(cfg.EventRecordQPS),
		EventBurst:                cfg.EventBurst,
		Clock:                     clk,
		Recorder:                  ev.recorder,
		Logger:                    log,
	})
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	w, err := events.NewRetryWriter(events.RetryConfig{}, c.EventSink(), clk, log)
	if err != nil {
		return nil, err
	}
	w.Start(ctx)
	ev.broadcaster.AddSink(w)
	bg.onStop(func() {
		// Flush what the API server has not taken yet.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(sctx)
	})
	return &clusterLink{cluster: c, publisher: cluster.NewPublisher(c), creds: creds}, nil
}

// podObjects serves configMaps, secrets and tokens to pod volumes and
// env: the API server in cluster mode, else the --object-manifest-path
// folder; nil when there is neither.
func podObjects(cfg *config.Config, l *clusterLink) volumes.Objects {
	switch {
	case l != nil:
		return l.cluster
	case cfg.ObjectManifestPath != "":
		return objects.NewFolder(cfg.ObjectManifestPath)
	}
	return nil
}

// publisherOrNil is the core's Publisher, nil in standalone mode.
func (l *clusterLink) publisherOrNil() lifecycle.Publisher {
	if l == nil {
		return nil
	}
	return l.publisher
}
