package embedded

import (
	"fmt"

	"github.com/minilet/minilet/internal/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// criError is an error classified twice: errors.Is matches its errdefs class,
// and status.FromError / cri-api's errors.IsNotFound see its gRPC code, so
// in-process CRI consumers written against a remote runtime keep working.
type criError struct {
	class error
	code  codes.Code
	msg   string
}

func (e *criError) Error() string { return e.msg + ": " + e.class.Error() }

func (e *criError) Unwrap() error { return e.class }

// GRPCStatus lets google.golang.org/grpc/status recognise the error's code.
func (e *criError) GRPCStatus() *status.Status { return status.New(e.code, e.Error()) }

func newErr(class error, code codes.Code, format string, args ...any) error {
	return &criError{class: class, code: code, msg: fmt.Sprintf(format, args...)}
}

func errNotFound(format string, args ...any) error {
	return newErr(errdefs.ErrNotFound, codes.NotFound, format, args...)
}

func errInvalid(format string, args ...any) error {
	return newErr(errdefs.ErrInvalidArgument, codes.InvalidArgument, format, args...)
}

func errConflict(format string, args ...any) error {
	return newErr(errdefs.ErrConflict, codes.FailedPrecondition, format, args...)
}

func errUnavailable(format string, args ...any) error {
	return newErr(errdefs.ErrUnavailable, codes.Unavailable, format, args...)
}

func errUnimplemented(method string) error {
	return status.Errorf(codes.Unimplemented, "embedded runtime: %s is not implemented", method)
}
