package controllers

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// Every outcome of a pass, and of its status write, says when the
// SimpleWebApp is reconciled again.
func TestNextResult(t *testing.T) {
	const retryIn, batch = 500 * time.Millisecond, 400 * time.Millisecond
	transient := &step.Error{Reason: webappv1.ReasonApplyFailed, Message: "timeout"}
	fight := &step.Error{Reason: webappv1.ReasonFieldConflict, Message: "fight", RetryAfter: 4 * time.Second}
	terminal := &step.Error{Reason: webappv1.ReasonPatchNotAllowed, Message: "no", Terminal: true}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "simplewebapps"}, "x")
	for _, tc := range []struct {
		name    string
		o       outcome
		rep     reported
		want    ctrl.Result
		wantErr error
	}{
		{"done, nothing to watch", outcome{}, reported{}, ctrl.Result{}, nil},
		{"an upgrade under way: back at its deadline", outcome{gate: gate{requeueAfter: time.Minute}}, reported{}, ctrl.Result{RequeueAfter: time.Minute}, nil},
		{"waiting for an upgrade slot", outcome{waitingForUpgrade: "2.0.0 waits"}, reported{}, ctrl.Result{RequeueAfter: upgradeSlotRetry}, nil},
		{"a stale read: at once, rate-limited", outcome{staleRead: true}, reported{}, ctrl.Result{Requeue: true}, nil},   //nolint:staticcheck // what nextResult returns on purpose
		{"a status write that conflicted", outcome{}, reported{err: step.ErrStaleRead}, ctrl.Result{Requeue: true}, nil}, //nolint:staticcheck // what nextResult returns on purpose
		{"the API server went away", outcome{failure: transient}, reported{unreachable: true}, ctrl.Result{RequeueAfter: unansweredRetry}, nil},
		{"a transient failure: backoff", outcome{failure: transient}, reported{}, ctrl.Result{}, transient},
		{"a field fight: after its backoff", outcome{failure: fight}, reported{}, ctrl.Result{RequeueAfter: 4 * time.Second}, nil},
		{"a terminal failure: waits for a change", outcome{failure: terminal, gate: gate{requeueAfter: time.Minute}}, reported{}, ctrl.Result{RequeueAfter: time.Minute}, nil},
		{"progress deferred to the batch", outcome{}, reported{deferred: true}, ctrl.Result{RequeueAfter: batch}, nil},
		{"the SimpleWebApp deleted during the write", outcome{}, reported{err: notFound}, ctrl.Result{}, nil},
		{"another status write error: backoff", outcome{}, reported{err: errors.New("boom")}, ctrl.Result{}, errors.New("boom")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nextResult(tc.o, tc.rep, retryIn, batch)
			if got != tc.want || (err == nil) != (tc.wantErr == nil) || err != nil && err.Error() != tc.wantErr.Error() {
				t.Fatalf("nextResult = %+v, %v; want %+v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
