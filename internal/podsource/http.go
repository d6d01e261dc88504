package podsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/minilet/minilet/internal/boundedread"
	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/podspec"
)

// HTTPConfig configures an HTTPSource.
type HTTPConfig struct {
	NodeName string        // required
	URL      string        // required; http or https (--manifest-url)
	Header   http.Header   // sent with every request (--manifest-url-header)
	Period   time.Duration // poll interval (httpCheckFrequency); default 20s
	Timeout  time.Duration // per request; default 10s
	Client   *http.Client  // default: a client with Timeout
	Clock    clock.WithTicker
	Logger   *slog.Logger
	OnError  ErrorFunc // may be nil
}

// HTTPSource polls a URL serving a Pod or a PodList (YAML or JSON). A
// failed request or a bad body keeps the last good set (a flaky server must
// not kill pods) and is reported through OnError, once per distinct problem.
// An empty 200 body is the empty set, as in the kubelet.
type HTTPSource struct {
	cfg  HTTPConfig
	log  *slog.Logger
	pub  *publisher
	errs *errorReporter
}

// NewHTTP checks cfg and returns a source; call Run to start it.
func NewHTTP(cfg HTTPConfig) (*HTTPSource, error) {
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("http pod source: NodeName is required: %w", errdefs.ErrInvalidArgument)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("http pod source: URL %q must be an http or https URL: %w", cfg.URL, errdefs.ErrInvalidArgument)
	}
	if cfg.Period < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("http pod source: Period and Timeout must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Period == 0 {
		cfg.Period = 20 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &HTTPSource{
		cfg:  cfg,
		log:  cfg.Logger.With("component", "podsource", "source", podspec.SourceHTTP, "url", cfg.URL),
		pub:  newPublisher(podspec.SourceHTTP),
		errs: newErrorReporter(cfg.OnError),
	}, nil
}

// Updates delivers full snapshots; an unread snapshot is replaced by a newer one.
func (s *HTTPSource) Updates() <-chan Update { return s.pub.ch }

// Run polls until ctx ends, then returns nil.
func (s *HTTPSource) Run(ctx context.Context) error {
	ticker := s.cfg.Clock.NewTicker(s.cfg.Period)
	defer ticker.Stop()
	for {
		s.Step(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// Step fetches the URL once and publishes the pods if they changed.
func (s *HTTPSource) Step(ctx context.Context) {
	pods, err := s.fetch(ctx)
	if err != nil && ctx.Err() != nil {
		return // shutting down
	}
	s.errs.begin()
	defer s.errs.end()
	if err != nil {
		s.log.Warn("cannot read manifests; keeping the last set", "err", err)
		s.errs.report(s.cfg.URL, err)
		return
	}
	pods = dropDuplicates(pods, s.cfg.URL, map[string]string{}, s.errs)
	if s.pub.publish(pods) {
		s.log.Debug("static pods changed", "pods", len(pods))
	}
}

// MaxBodySize bounds the body read from the URL (the kubelet's limit,
// 10 MiB); a longer answer is refused, whatever Content-Length says.
const MaxBodySize = 10 << 20

func (s *HTTPSource) fetch(ctx context.Context) ([]*v1.Pod, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for k, vs := range s.cfg.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w: %w", s.cfg.URL, err, errdefs.ErrUnavailable)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %s: %w", s.cfg.URL, resp.Status, errdefs.ErrUnavailable)
	}
	if resp.ContentLength > MaxBodySize {
		return nil, &ManifestError{Path: s.cfg.URL, Err: fmt.Errorf("body of %d bytes (Content-Length) is %w of %s",
			resp.ContentLength, boundedread.ErrTooLarge, boundedread.FormatSize(MaxBodySize))}
	}
	data, err := boundedread.All(resp.Body, MaxBodySize)
	if errors.Is(err, boundedread.ErrTooLarge) {
		return nil, &ManifestError{Path: s.cfg.URL, Err: fmt.Errorf("body: %w", err)}
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s: read body: %w: %w", s.cfg.URL, err, errdefs.ErrUnavailable)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		// As the kubelet does: an empty answer is an empty set, so a URL
		// with nothing to run still counts as read (housekeeping waits for
		// every source's first read).
		s.log.Info("manifest URL answered an empty body: no static pods")
		return nil, nil
	}
	return ParseManifest(data, s.cfg.URL, podspec.SourceHTTP, s.cfg.NodeName, s.cfg.Clock.Now())
}
