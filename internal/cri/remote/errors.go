package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/minilet/minilet/internal/errdefs"
)

// classify adds the errdefs class of a CRI error, keeping the gRPC status
// in the chain (status.Code and crierrors.IsNotFound still see it).
func classify(err error) error {
	if err == nil {
		return nil
	}
	var class error
	switch status.Code(err) {
	case codes.NotFound:
		class = errdefs.ErrNotFound
	case codes.InvalidArgument, codes.OutOfRange:
		class = errdefs.ErrInvalidArgument
	case codes.AlreadyExists:
		class = errdefs.ErrAlreadyExists
	case codes.Unavailable:
		class = errdefs.ErrUnavailable
	case codes.FailedPrecondition, codes.Aborted:
		class = errdefs.ErrConflict
	case codes.ResourceExhausted:
		class = errdefs.ErrResourceExhausted
	case codes.DeadlineExceeded:
		class = context.DeadlineExceeded
	}
	if class == nil || errors.Is(err, class) {
		return err
	}
	return fmt.Errorf("%w: %w", class, err)
}

// RouteClientLogs sends the cri-client library's klog output to log, at
// debug level: the client logs every failed call as an error, and the
// callers already report the errors they care about. It changes klog's
// process-wide logger, so only a binary's composition root calls it.
func RouteClientLogs(log *slog.Logger) {
	klog.SetSlogLogger(slog.New(debugOnly{log.Handler()}))
}

// debugOnly lowers every record to debug level.
type debugOnly struct{ h slog.Handler }

func (d debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugOnly) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return debugOnly{d.h.WithAttrs(attrs)}
}

func (d debugOnly) WithGroup(name string) slog.Handler { return debugOnly{d.h.WithGroup(name)} }
