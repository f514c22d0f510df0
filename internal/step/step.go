// Package step holds the typed error every stage of the reconcile pipeline
// fails with: the reason status reports (a webappv1.Reason*) and whether it
// waits for a change (terminal) or is retried.
package step

import (
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// Error is a failed pipeline step with the reason it reports in status
// (a webappv1.Reason*). Terminal errors wait for a change of the spec or the
// channels instead of being retried with backoff.
type Error struct {
	Reason   string
	Message  string
	Terminal bool
	// RetryAfter, when set, is a known wait (a field fight's backoff): the
	// reconcile is retried after it, not by the rate limiter, whose delay
	// grows with every failure (up to minutes after a long fight).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Reason + ": " + e.Message }

// Stalled is a terminal Error.
func Stalled(reason, format string, args ...any) error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Terminal: true}
}

// As classifies any error from the pipeline; unknown errors are transient
// and keep the given reason.
func As(err error, reason string) *Error {
	if se, ok := errors.AsType[*Error](err); ok {
		return se
	}
	return &Error{Reason: reason, Message: err.Error()}
}

// ErrStaleRead says the cache holds an older copy of an object than the
// operator's own last write. Not a failure: requeued through the rate
// limiter until the cache catches up.
var ErrStaleRead = errors.New("the cache is behind the operator's last write")

// ObjectError classifies the API server's answer to a write of one object:
// forbidden or invalid is final for this input (ApplyRejected, with the
// object and the server's message); a conflict is a stale read; anything
// else (timeouts, unavailable) is retried.
func ObjectError(err error, kind, name, verb string) error {
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsMethodNotSupported(err):
		return Stalled(webappv1.ReasonApplyRejected, "%s %s: the API server refused the %s: %s", kind, name, verb, string(apierrors.ReasonForError(err))+": "+errMessage(err))
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s %s: %w: %v", kind, name, ErrStaleRead, err)
	}
	return fmt.Errorf("%s %s: %s: %w", kind, name, verb, err)
}

func errMessage(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Message
	}
	return err.Error()
}

// IsStaleRead reports whether err means the cache was behind.
func IsStaleRead(err error) bool { return errors.Is(err, ErrStaleRead) }
