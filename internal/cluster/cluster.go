// Package cluster joins minilet to a real Kubernetes API server as a node:
// it registers and heartbeats the Node (status and a Lease), turns the
// pods bound to the node into full snapshots for the sync loop, writes pod
// status back (mirror pods for static pods), and is a sink for events.
//
// It works under the Node authorizer and the NodeRestriction admission
// plugin: every request touches only this node's own objects.
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/events"
	"github.com/minilet/minilet/internal/podspec"
)

// SourceAPI is the pod source name of pods from the API server, as the
// kubelet spells it in the kubernetes.io/config.source annotation.
const SourceAPI = podspec.SourceAPI

// Config configures a Cluster. Zero durations and rates take the
// kubelet's defaults.
type Config struct {
	// Kubeconfig is the path of the kubeconfig naming the API server and
	// the node's credentials (bearer token or client certificate).
	// Required unless REST is given; named in errors either way.
	Kubeconfig string
	// REST, when set, is the API server and credentials to use instead of
	// reading Kubeconfig (e.g. a client certificate that rotates).
	REST *rest.Config
	// NodeName is the Node object's name. Required.
	NodeName string

	// NodeStatusUpdateFrequency is how often the node status is computed
	// and written when it changed; default 10s.
	NodeStatusUpdateFrequency time.Duration
	// NodeStatusReportFrequency is the longest time between two status
	// writes even when nothing changed; default 5m.
	NodeStatusReportFrequency time.Duration
	// LeaseDurationSeconds is the node Lease's duration; default 40. The
	// lease is renewed every quarter of it (10 s by default).
	LeaseDurationSeconds int32

	// APIQPS and APIBurst limit requests other than events; default 50 and 100.
	APIQPS   float32
	APIBurst int
	// EventQPS and EventBurst limit event writes (eventRecordQPS,
	// eventBurst); default 50 and 100. A negative EventQPS disables the limit.
	EventQPS   float32
	EventBurst int
	// RequestTimeout bounds each non-watch request; default 10s.
	RequestTimeout time.Duration

	// Recorder receives the node events the status loop notices (Rebooted:
	// the API server's node has another boot ID); default none.
	Recorder events.Recorder

	// Clock drives every timer; default the real clock.
	Clock clock.WithTicker
	// Logger receives the component's logs; default slog.Default().
	Logger *slog.Logger
}

// Cluster is minilet's connection to the API server. Create it with New,
// run it with Start, and stop it with Stop.
type Cluster struct {
	cfg    Config
	log    *slog.Logger
	clock  clock.WithTicker
	client kubernetes.Interface // writes, with a timeout
	watch  kubernetes.Interface // list/watch, no timeout
	events kubernetes.Interface // event writes, own rate limit

	node    *nodeStatus
	pods    *podSource
	status  *statusManager
	evSink  *EventSink
	objects *objectWatches
	started atomic.Bool

	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New validates cfg and builds the API clients; nothing is contacted
// until Start.
func New(cfg Config) (*Cluster, error) {
	switch {
	case cfg.Kubeconfig == "" && cfg.REST == nil:
		return nil, fmt.Errorf("cluster: kubeconfig path is required: %w", errdefs.ErrInvalidArgument)
	case cfg.NodeName == "":
		return nil, fmt.Errorf("cluster: node name is required: %w", errdefs.ErrInvalidArgument)
	case cfg.NodeStatusUpdateFrequency < 0:
		return nil, fmt.Errorf("cluster: nodeStatusUpdateFrequency %s must not be negative: %w", cfg.NodeStatusUpdateFrequency, errdefs.ErrInvalidArgument)
	case cfg.NodeStatusReportFrequency < 0:
		return nil, fmt.Errorf("cluster: nodeStatusReportFrequency %s must not be negative: %w", cfg.NodeStatusReportFrequency, errdefs.ErrInvalidArgument)
	case cfg.LeaseDurationSeconds < 0:
		return nil, fmt.Errorf("cluster: nodeLeaseDurationSeconds %d must not be negative: %w", cfg.LeaseDurationSeconds, errdefs.ErrInvalidArgument)
	}
	setDefaults(&cfg)
	base := cfg.REST
	if base == nil {
		var err error
		if base, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("cluster: kubeconfig %s: %w: %w", cfg.Kubeconfig, errdefs.ErrInvalidArgument, err)
		}
	}
	base = rest.CopyConfig(base)
	var err error
	c := &Cluster{cfg: cfg, log: cfg.Logger.With("component", "cluster"), clock: cfg.Clock}
	base.UserAgent = "minilet/" + cfg.NodeName
	mk := func(qps float32, burst int, timeout time.Duration) (kubernetes.Interface, error) {
		rc := rest.CopyConfig(base)
		rc.QPS, rc.Burst, rc.Timeout = qps, burst, timeout
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("cluster: client for kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		return cs, nil
	}
	if c.client, err = mk(cfg.APIQPS, cfg.APIBurst, cfg.RequestTimeout); err != nil {
		return nil, err
	}
	if c.watch, err = mk(cfg.APIQPS, cfg.APIBurst, 0); err != nil {
		return nil, err
	}
	if c.events, err = mk(cfg.EventQPS, cfg.EventBurst, cfg.RequestTimeout); err != nil {
		return nil, err
	}
	c.node = newNodeStatus(c)
	c.pods = newPodSource(c)
	c.status = newStatusManager(c)
	c.evSink = &EventSink{client: c.events}
	c.objects = newObjectWatches(c)
	return c, nil
}

func setDefaults(cfg *Config) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.NodeStatusUpdateFrequency, 10*time.Second)
	def(&cfg.NodeStatusReportFrequency, 5*time.Minute)
	def(&cfg.RequestTimeout, 10*time.Second)
	if cfg.LeaseDurationSeconds == 0 {
		cfg.LeaseDurationSeconds = 40
	}
	if cfg.APIQPS == 0 {
		cfg.APIQPS = 50
	}
	if cfg.APIBurst == 0 {
		cfg.APIBurst = 100
	}
	if cfg.EventQPS == 0 {
		cfg.EventQPS = 50
	}
	if cfg.EventBurst == 0 {
		cfg.EventBurst = 100
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Recorder == nil {
		cfg.Recorder = events.Nop{}
	}
}

// NodeSource builds the node as the agent sees it now: labels, addresses,
// capacity, allocatable, conditions and node info.
type NodeSource func() *v1.Node

// Start runs node registration and heartbeats (of the node that source
// builds), the pod informer and the status writer until ctx ends or Stop
// is called. None of them ever gives up: an unreachable API server is
// retried with back-off. Calling Start again does nothing.
func (c *Cluster) Start(ctx context.Context, source NodeSource) error {
	if source == nil {
		return fmt.Errorf("cluster: a node source is required: %w", errdefs.ErrInvalidArgument)
	}
	if !c.started.CompareAndSwap(false, true) {
		return nil
	}
	c.node.source = source
	ctx, c.cancel = context.WithCancel(ctx)
	c.wg.Add(5)
	go func() { defer c.wg.Done(); c.objects.run(ctx) }()
	go func() { defer c.wg.Done(); c.node.runStatus(ctx) }()
	go func() { defer c.wg.Done(); c.node.runLease(ctx) }()
	go func() { defer c.wg.Done(); c.pods.run(ctx) }()
	go func() { defer c.wg.Done(); c.status.run(ctx) }()
	return nil
}

// Stop ends every goroutine Start began and waits for them. It is
// idempotent; pods are not touched.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
	})
	c.wg.Wait()
}

// Client is the node's API client (for callers that need a request the
// package does not offer).
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// EventSink is the sink writing events to the API server; wrap it in an
// events.RetryWriter before adding it to the broadcaster.
func (c *Cluster) EventSink() *EventSink { return c.evSink }
