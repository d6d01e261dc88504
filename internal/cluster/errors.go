package cluster

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/minilet/minilet/internal/errdefs"
)

// classify wraps an API error with the errdefs class that callers test
// with errors.Is; what names the request.
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	var class error
	switch {
	case apierrors.IsNotFound(err), apierrors.IsGone(err):
		class = errdefs.ErrNotFound
	case apierrors.IsAlreadyExists(err):
		class = errdefs.ErrAlreadyExists
	case apierrors.IsConflict(err):
		class = errdefs.ErrConflict
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		class = errdefs.ErrInvalidArgument
	case apierrors.IsTooManyRequests(err):
		class = errdefs.ErrResourceExhausted
	default:
		class = errdefs.ErrUnavailable
	}
	return fmt.Errorf("%s: %w: %w", what, class, err)
}

// isGone reports whether the pod a request was about no longer exists
// (deleted, or replaced by one with another UID).
func isGone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err) && isUIDMismatch(err)
}

func isUIDMismatch(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil {
		return false
	}
	for _, c := range se.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}
