// Package errdefs classifies errors so callers test them with errors.Is
// instead of comparing messages. Translation to HTTP or gRPC codes happens
// only at the edges (internal/server, the CRI servers).
package errdefs

import "errors"

// The classes. Wrap them with fmt.Errorf("...: %w", errdefs.ErrNotFound).
var (
	ErrNotFound          = errors.New("not found")
	ErrInvalidArgument   = errors.New("invalid argument")
	ErrAlreadyExists     = errors.New("already exists")
	ErrUnavailable       = errors.New("unavailable")
	ErrConflict          = errors.New("conflict")
	ErrResourceExhausted = errors.New("resource exhausted")
)

// IsNotFound reports whether err is, or wraps, ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidArgument reports whether err is, or wraps, ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }
