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

// Classify returns err, also matching class with errors.Is, without
// repeating the class's text in the message (for errors from elsewhere,
// e.g. a gRPC status, whose message already says what went wrong).
func Classify(err, class error) error {
	if err == nil || errors.Is(err, class) {
		return err
	}
	return classified{err, class}
}

type classified struct{ err, class error }

func (c classified) Error() string   { return c.err.Error() }
func (c classified) Unwrap() []error { return []error{c.err, c.class} }
