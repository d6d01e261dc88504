// Package remote drives a real CRI runtime (containerd, CRI-O) over its
// socket, through k8s.io/cri-client. The client keeps one gRPC connection
// that reconnects by itself (with back-off) when the runtime goes away and
// comes back, so a runtime restart needs nothing from the caller: calls
// made while it is down fail with errdefs.ErrUnavailable, and calls after
// it returns succeed on the same Runtime.
//
// Errors keep their gRPC status (crierrors.IsNotFound, status.Code work)
// and are also classified with internal/errdefs (errors.Is).
package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/minilet/minilet/internal/errdefs"
)

// DefaultRequestTimeout is the kubelet's --runtime-request-timeout default.
const DefaultRequestTimeout = 2 * time.Minute

// Config configures a Runtime.
type Config struct {
	// Endpoint is the runtime's CRI socket, e.g.
	// unix:///run/containerd/containerd.sock. Required.
	Endpoint string
	// RequestTimeout bounds every CRI call (--runtime-request-timeout;
	// sandbox creation gets twice as long, ExecSync its own timeout on
	// top). Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// StartupWait is how long New keeps retrying the version handshake
	// while the runtime does not answer yet. Default 0: one attempt.
	StartupWait time.Duration
	// DrainTimeout bounds how long Close waits for the calls that change
	// the runtime's state and are still running (see detach.go). Default
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives connection events. Default: discard.
	Logger *slog.Logger
}

// Runtime is a CRI runtime behind a socket. It implements the cri-api
// RuntimeService and ImageManagerService interfaces.
type Runtime struct {
	criapi.RuntimeService
	criapi.ImageManagerService

	log      *slog.Logger
	version  *runtimeapi.VersionResponse
	timeout  time.Duration // every call's (--runtime-request-timeout)
	drain    time.Duration // Close's wait for calls in flight
	inflight inflight

	closeOnce sync.Once
	closeErr  error
}

var (
	_ criapi.RuntimeService      = (*Runtime)(nil)
	_ criapi.ImageManagerService = (*Runtime)(nil)
)

// New connects to the runtime at cfg.Endpoint and checks that it speaks
// CRI v1 (the version handshake). A runtime that does not answer within
// cfg.StartupWait is an errdefs.ErrUnavailable error; a bad endpoint is
// errdefs.ErrInvalidArgument.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Endpoint == "" {
		return nil, fmt.Errorf("container runtime endpoint: empty: %w", errdefs.ErrInvalidArgument)
	}
	if !strings.HasPrefix(cfg.Endpoint, "unix://") && !strings.HasPrefix(cfg.Endpoint, "/") {
		return nil, fmt.Errorf("container runtime endpoint %q: want unix:///path/to/socket: %w", cfg.Endpoint, errdefs.ErrInvalidArgument)
	}
	if cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("runtime request timeout %s: must not be negative: %w", cfg.RequestTimeout, errdefs.ErrInvalidArgument)
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.DrainTimeout < 0 {
		return nil, fmt.Errorf("runtime drain timeout %s: must not be negative: %w", cfg.DrainTimeout, errdefs.ErrInvalidArgument)
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("endpoint", cfg.Endpoint)

	deadline := time.Now().Add(cfg.StartupWait)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		r, err := connect(ctx, cfg, log)
		if err == nil {
			log.Info("connected to the container runtime", "runtime", r.version.GetRuntimeName(),
				"version", r.version.GetRuntimeVersion(), "criVersion", r.version.GetRuntimeApiVersion())
			return r, nil
		}
		if !errors.Is(err, errdefs.ErrUnavailable) || time.Now().Add(backoff).After(deadline) {
			return nil, err
		}
		log.Warn("container runtime not answering yet; retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("container runtime %s: %w (%w)", cfg.Endpoint, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 3*time.Second)
	}
}

// connect builds both clients and does the handshake once.
func connect(ctx context.Context, cfg Config, log *slog.Logger) (*Runtime, error) {
	// The builders use their timeout both to dial-validate and as every
	// call's timeout, so it is the request timeout; the handshake itself
	// is bounded separately below so a dead socket fails fast.
	hctx, cancel := context.WithTimeout(ctx, min(cfg.RequestTimeout, 30*time.Second))
	defer cancel()
	rs, err := criclient.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(cfg.Endpoint).
		WithConnectionTimeout(cfg.RequestTimeout).
		WithTracerProvider(nil).
		Build(hctx)
	if err != nil {
		return nil, fmt.Errorf("container runtime %s: version handshake: %w", cfg.Endpoint, classify(err))
	}
	is, err := criclient.NewRemoteImageServiceBuilder().
		WithEndpoint(cfg.Endpoint).
		WithConnectionTimeout(cfg.RequestTimeout).
		WithTracerProvider(nil).
		Build(hctx)
	if err != nil {
		_ = rs.Close(context.Background())
		return nil, fmt.Errorf("container runtime %s: image service: %w", cfg.Endpoint, classify(err))
	}
	v, err := rs.Version(hctx, "v1")
	if err != nil {
		_ = rs.Close(context.Background())
		_ = is.Close(context.Background())
		return nil, fmt.Errorf("container runtime %s: version: %w", cfg.Endpoint, classify(err))
	}
	if v.GetRuntimeApiVersion() != "v1" {
		_ = rs.Close(context.Background())
		_ = is.Close(context.Background())
		return nil, fmt.Errorf("container runtime %s speaks CRI %q, want v1: %w", cfg.Endpoint, v.GetRuntimeApiVersion(), errdefs.ErrInvalidArgument)
	}
	return &Runtime{RuntimeService: rs, ImageManagerService: is, log: log, version: v,
		timeout: cfg.RequestTimeout, drain: cfg.DrainTimeout}, nil
}

// RuntimeVersion is what the runtime said in the handshake, e.g.
// containerd://1.6.20.
func (r *Runtime) RuntimeVersion() string {
	return r.version.GetRuntimeName() + "://" + r.version.GetRuntimeVersion()
}

// Close waits for the calls still changing the runtime's state (for at
// most Config.DrainTimeout, or until ctx ends), then closes both
// connections. Idempotent. The runtime's sandboxes and containers keep
// running.
func (r *Runtime) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		if running := r.inflight.running(); len(running) > 0 {
			r.log.Info("waiting for runtime calls in flight before closing the connection", "calls", running, "atMost", r.drain)
		}
		dctx, cancel := context.WithTimeout(ctx, r.drain)
		if !r.inflight.drain(dctx) {
			r.log.Warn("closing the connection with runtime calls still in flight; the runtime may cancel them",
				"calls", r.inflight.running(), "waited", r.drain)
		}
		cancel()
		r.closeErr = errors.Join(r.RuntimeService.Close(ctx), r.ImageManagerService.Close(ctx))
	})
	return r.closeErr
}
