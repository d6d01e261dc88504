package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minilet/minilet/internal/errdefs"
)

// client talks to the agent's read-only HTTP API.
type client struct {
	base string
	http *http.Client
	// tls is the HTTPS configuration (nil for plain HTTP), for the
	// upgraded connections of exec and port-forward.
	tls *tls.Config
}

// APIError is a non-200 answer from the agent, carrying its Status.
type APIError struct {
	Code    int
	Reason  metav1.StatusReason
	Message string
}

func (e *APIError) Error() string {
	return e.Message
}

// Unwrap classifies the error so callers can use errdefs with errors.Is.
func (e *APIError) Unwrap() error {
	switch e.Code {
	case http.StatusNotFound:
		return errdefs.ErrNotFound
	case http.StatusBadRequest:
		return errdefs.ErrInvalidArgument
	case http.StatusServiceUnavailable:
		return errdefs.ErrUnavailable
	case http.StatusConflict:
		return errdefs.ErrConflict
	}
	return nil
}

// do sends GET path and returns the response when it is 200; otherwise the
// body is decoded as a Status into an *APIError.
func (c *client) do(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", path, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the agent at %s (is minilet running? see --server): %w", c.base, errors.Join(err, errdefs.ErrUnavailable))
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return nil, &APIError{Code: resp.StatusCode, Reason: st.Reason, Message: st.Message}
	}
	msg := strings.TrimSpace(string(body))
	if msg == "" {
		msg = resp.Status
	}
	return nil, &APIError{Code: resp.StatusCode, Message: fmt.Sprintf("GET %s: %s", path, msg)}
}

// getJSON decodes the 200 answer to GET path into v.
func (c *client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode answer to GET %s: %w", path, err)
	}
	return nil
}
