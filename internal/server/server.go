// Package server is the agent's kubelet API: pods, node, events, container
// logs, stats, devices, images, health, configuration and metrics, all in
// ordinary Kubernetes JSON, behind the kubelet's authentication and
// authorization (New); and the unauthenticated read-only port, which
// serves only what the kubelet's read-only port serves (NewReadOnly).
// Errors from the providers are classified with errdefs and translated to
// HTTP status codes here, and only here.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// DefaultShutdownTimeout bounds how long Serve waits for in-flight requests
// once its context ends.
const DefaultShutdownTimeout = 5 * time.Second

// Limits on what a client can hold: a connection that sends no complete
// request header within DefaultReadHeaderTimeout, or stays idle between
// requests longer than DefaultIdleTimeout (the kubelet's 90 s, the keep-alive
// of Go's default transport), is closed; a request header is at most
// MaxHeaderBytes (the kubelet's 1 MiB). Bodies and long-running responses
// (followed logs, exec) are not cut: the kubelet's 4 h read and write
// timeouts would end a followed log, so they are left out.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	MaxHeaderBytes           = 1 << 20
)

// Config holds the server's providers and settings. Every provider may be
// nil; its endpoints then answer 404 "not enabled".
type Config struct {
	Pods   PodLister
	Node   NodeGetter
	Events EventLister
	Logs   LogLocator
	// Running, when set, ends followed logs of containers that stopped.
	Running ContainerRunningChecker
	Stats   SummaryProvider
	Devices DeviceLister
	Images  ImageLister
	// Streams serves exec, attach and port-forward.
	Streams Streamer
	// Gatherer is served on /metrics, its prober_* families also on
	// /metrics/probes.
	Gatherer prometheus.Gatherer
	// Profiling serves Go's profiles under /debug/pprof/
	// (enableProfilingHandler).
	Profiling bool
	// Configz is served on /configz as {"kubeletconfig": Configz}.
	Configz any
	// NodeLogDir, when set, is served under /logs/ (the kubelet serves
	// /var/log there).
	NodeLogDir string
	// Auth authenticates and authorizes every request of the full API;
	// nil lets every request through (tests).
	Auth Guard
	// Healthy, when set, fails /healthz with its error (the sync loop is
	// stuck), as the kubelet's syncloop check does.
	Healthy func() error
	// Logger receives request errors. Default: discard.
	Logger *slog.Logger
	// ShutdownTimeout bounds graceful shutdown. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout bounds the wait for a request's header. Default
	// DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long. Default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// LogPollInterval bounds the wait between checks of a followed log
	// file. Default logs.DefaultPollInterval.
	LogPollInterval time.Duration
}

// Guard puts authentication and authorization in front of a handler.
type Guard interface {
	Wrap(next http.Handler) http.Handler
}

// Server is an HTTP API. Create it with New or NewReadOnly and run it with
// Serve.
type Server struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler
}

// New builds the full kubelet API, guarded by cfg.Auth.
func New(cfg Config) *Server {
	s := newServer(cfg)
	mux := s.readOnlyMux()
	mux.HandleFunc("GET /node", s.node)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	mux.HandleFunc("GET /runningpods/", s.runningPods)
	mux.HandleFunc("GET /configz", s.configz)
	mux.HandleFunc("GET /devices", s.devices)
	mux.HandleFunc("GET /images", s.images)
	s.routeStreams(mux)
	if cfg.NodeLogDir != "" {
		mux.Handle("GET /logs/", http.StripPrefix("/logs/", http.FileServer(http.Dir(cfg.NodeLogDir))))
	}
	if cfg.Profiling {
		// Go's profiles, as the kubelet serves them (nodes/proxy).
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	s.handler = mux
	if cfg.Auth != nil {
		s.handler = cfg.Auth.Wrap(mux)
	}
	return s
}

// NewReadOnly builds the read-only API: what the kubelet's read-only port
// serves (healthz, pods, stats, metrics), no logs, no exec, no auth.
func NewReadOnly(cfg Config) *Server {
	s := newServer(cfg)
	s.handler = s.readOnlyMux()
	return s
}

func newServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Server{cfg: withTimeouts(cfg), log: cfg.Logger}
}

// withTimeouts fills in the default timeouts.
func withTimeouts(cfg Config) Config {
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	return cfg
}

// readOnlyMux routes the endpoints both APIs serve.
func (s *Server) readOnlyMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /pods", s.pods)
	mux.HandleFunc("GET /stats/summary", s.summary)
	mux.HandleFunc("GET /metrics/resource", s.resourceMetrics)
	if g := s.cfg.Gatherer; g != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
		mux.Handle("GET /metrics/probes", promhttp.HandlerFor(prefixGatherer{g, "prober_"}, promhttp.HandlerOpts{}))
	} else {
		notEnabled := func(w http.ResponseWriter, _ *http.Request) { s.notEnabled(w, "metrics") }
		mux.HandleFunc("GET /metrics", notEnabled)
		mux.HandleFunc("GET /metrics/probes", notEnabled)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// Handler returns the server's HTTP handler, for embedding or tests.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers requests on ln until ctx ends, then shuts down gracefully:
// streaming requests (followed logs) are cancelled, others get up to
// ShutdownTimeout to finish. It returns nil after a shutdown caused by ctx,
// or the error that stopped serving. Serve closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	reqCtx, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	srv.RegisterOnShutdown(cancelRequests)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		return fmt.Errorf("http server on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	shutErr := srv.Shutdown(shutCtx)
	if shutErr != nil {
		// Timed out: cut the remaining connections.
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server on %s: %w", ln.Addr(), err)
	}
	if shutErr != nil {
		return fmt.Errorf("http server on %s: shutdown: %w", ln.Addr(), shutErr)
	}
	return nil
}

// writeJSON writes v as JSON with status 200.
func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.writeError(w, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// writeError translates a classified error into a v1.Status response.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	code, reason := classify(err)
	if code >= 500 {
		s.log.Warn("request failed", "err", err)
	}
	writeStatus(w, code, reason, err.Error())
}

func (s *Server) notEnabled(w http.ResponseWriter, what string) {
	writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, what+" not enabled on this agent")
}

// classify maps errdefs classes to HTTP codes and Status reasons.
func classify(err error) (int, metav1.StatusReason) {
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound, metav1.StatusReasonNotFound
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return http.StatusBadRequest, metav1.StatusReasonBadRequest
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return http.StatusConflict, metav1.StatusReasonAlreadyExists
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict, metav1.StatusReasonConflict
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, metav1.StatusReasonTimeout
	default:
		return http.StatusInternalServerError, metav1.StatusReasonInternalError
	}
}

// writeStatus writes a Kubernetes Status object as the error body.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reason,
		Code:     int32(code),
	}
	b, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
