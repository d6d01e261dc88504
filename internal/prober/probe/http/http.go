// Package http runs httpGet probes. 2xx and 3xx answers are success;
// redirects are followed only while they stay on the same host, and a
// redirect elsewhere ends the probe as a success with a warning. TLS
// certificates are not verified, keep-alives are off and at most 10 KiB
// of the body is read.
package http

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/prober/probe"
)

// maxRedirects is how many same-host redirects a probe follows.
const maxRedirects = 10

// Prober sends httpGet probes. It is safe for concurrent use; one Prober
// serves every probe of the agent.
type Prober struct {
	transport *http.Transport
}

// New returns a Prober with its own transport: no proxy, no keep-alive
// (each probe is a fresh connection, as the kubelet does, so that a probe
// sees a server that can accept), TLS without verification, and
// connections closed with SO_LINGER 0 so that the probing side leaves no
// TIME_WAIT sockets.
func New() *Prober {
	d := &net.Dialer{KeepAlive: -1} // one request per connection: no TCP keep-alive
	t := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, as the kubelet
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			return c, nil
		},
	}
	return &Prober{transport: t}
}

// NewRequest builds the GET request for action against a container whose
// pod has podIP: scheme, host (default the pod IP), port (number or named
// container port), path and headers (a Host header sets the request's
// host). User-Agent and Accept get the kubelet's defaults unless set.
func NewRequest(action *v1.HTTPGetAction, c *v1.Container, podIP string) (*http.Request, error) {
	scheme := strings.ToLower(string(action.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	if scheme != "http" && scheme != "https" {
		return nil, fmt.Errorf("container %q: httpGet.scheme %q is not HTTP or HTTPS: %w", c.Name, action.Scheme, errdefs.ErrInvalidArgument)
	}
	host := action.Host
	if host == "" {
		host = podIP
	}
	if host == "" {
		return nil, fmt.Errorf("container %q: httpGet has no host and the pod has no IP yet: %w", c.Name, errdefs.ErrUnavailable)
	}
	port, err := probe.ResolvePort(action.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(action.Path)
	if err != nil {
		u = &url.URL{Path: action.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("container %q: httpGet request: %w", c.Name, errors.Join(err, errdefs.ErrInvalidArgument))
	}
	for _, h := range action.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", probe.UserAgent)
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	}
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h
	}
	return req, nil
}

// Probe sends req and classifies the answer. Transport errors (refused,
// timed out) are failures, not errors.
func (p *Prober) Probe(ctx context.Context, req *http.Request, timeout time.Duration) (probe.Result, string, error) {
	client := &http.Client{Transport: p.transport, Timeout: timeout, CheckRedirect: sameHostRedirects}
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		return probe.Failure, err.Error(), nil
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, probe.MaxOutput))
	if err != nil {
		return probe.Failure, fmt.Sprintf("reading the response body: %v", err), nil
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return probe.Success, string(b), nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return probe.Warning, "Probe terminated redirects, Response body: " + string(b), nil
	default:
		return probe.Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode), nil
	}
}

// sameHostRedirects follows a redirect only to the host of the first
// request, at most maxRedirects times; a redirect elsewhere hands back the
// 3xx itself.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	return nil
}
