package embedded

import (
	"context"
	"errors"
	"fmt"

	"github.com/minilet/minilet/internal/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The runtime's packages classify their errors with internal/errdefs. The
// Runtime is the edge where an error also gets the gRPC code of its class,
// so that in-process CRI consumers written against a remote runtime
// (status.FromError, cri-api's errors.IsNotFound) keep working.

// criError is an error that errors.Is matches against its class and that
// google.golang.org/grpc/status sees the code of.
type criError struct {
	err  error
	code codes.Code
}

func (e *criError) Error() string { return e.err.Error() }

func (e *criError) Unwrap() error { return e.err }

// GRPCStatus lets google.golang.org/grpc/status recognise the error's code.
func (e *criError) GRPCStatus() *status.Status { return status.New(e.code, e.Error()) }

// grpcCodes maps the error classes to gRPC codes; the first match wins.
var grpcCodes = []struct {
	class error
	code  codes.Code
}{
	{errdefs.ErrNotFound, codes.NotFound},
	{errdefs.ErrInvalidArgument, codes.InvalidArgument},
	{errdefs.ErrAlreadyExists, codes.AlreadyExists},
	{errdefs.ErrConflict, codes.FailedPrecondition},
	{errdefs.ErrUnavailable, codes.Unavailable},
	{errdefs.ErrResourceExhausted, codes.ResourceExhausted},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// criErr gives err the gRPC code of its class. Unclassified errors (such as
// an exec's k8s.io/utils/exec.CodeExitError, which callers type-assert)
// and nil are returned as they are.
func criErr(err error) error {
	var ce *criError
	if err == nil || errors.As(err, &ce) {
		return err
	}
	for _, c := range grpcCodes {
		if errors.Is(err, c.class) {
			return &criError{err: err, code: c.code}
		}
	}
	return err
}

// newErr is a classified error with the runtime's message: "<message>:
// <class>".
func newErr(class error, format string, args ...any) error {
	return criErr(fmt.Errorf(format+": %w", append(args, class)...))
}

func errNotFound(format string, args ...any) error {
	return newErr(errdefs.ErrNotFound, format, args...)
}

func errInvalid(format string, args ...any) error {
	return newErr(errdefs.ErrInvalidArgument, format, args...)
}

func errConflict(format string, args ...any) error {
	return newErr(errdefs.ErrConflict, format, args...)
}

func errUnavailable(format string, args ...any) error {
	return newErr(errdefs.ErrUnavailable, format, args...)
}

func errUnimplemented(method string) error {
	return status.Errorf(codes.Unimplemented, "embedded runtime: %s is not implemented", method)
}
