package controllers

import (
	"errors"
	"fmt"
)

// Reasons of the Stalled condition: why a generation cannot be applied.
const (
	ReasonChannelNotFound  = "ChannelNotFound"
	ReasonChannelInvalid   = "ChannelInvalid"
	ReasonVersionNotFound  = "VersionNotFound"
	ReasonRenderFailed     = "RenderFailed"
	ReasonOperatorTooOld   = "OperatorTooOld"
	ReasonPatchNotAllowed  = "PatchNotAllowed"
	ReasonApplyFailed      = "ApplyFailed"
	ReasonRolloutFailed    = "RolloutFailed"
	ReasonRolledBack       = "RolledBack"
	ReasonProgressing      = "Progressing"
	ReasonAvailable        = "Available"
	ReasonReconcileSuccess = "ReconciliationSucceeded"
)

// StepError is a failed pipeline step with the reason it reports in status.
// Terminal errors wait for a change of the spec or the channels instead of
// being retried with backoff.
type StepError struct {
	Reason   string
	Message  string
	Terminal bool
}

func (e *StepError) Error() string { return e.Reason + ": " + e.Message }

func stalled(reason, format string, args ...any) error {
	return &StepError{Reason: reason, Message: fmt.Sprintf(format, args...), Terminal: true}
}

// asStepError classifies any error from the pipeline; unknown errors are
// transient and keep the given reason.
func asStepError(err error, reason string) *StepError {
	var se *StepError
	if errors.As(err, &se) {
		return se
	}
	return &StepError{Reason: reason, Message: err.Error()}
}
