package controllers

import (
	"context"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/step"
)

// statusWriter is the one writer of SimpleWebApps' status: an
// optimistic-lock merge patch (write), the record of the operator's own
// writes of SimpleWebApps (the applier's OwnWrites, which records its
// children: one record), and the batch window in which a roll-out's progress
// may wait to be written once (mayWait).
type statusWriter struct {
	client client.Client
	writes *apply.OwnWrites
	// batch is how long a Deployment's status changes are collected before
	// the SimpleWebApp's status is written once for them.
	batch time.Duration
}

// appKey is a SimpleWebApp's key in OwnWrites.
func appKey(namespace, name string) apply.Key {
	return apply.Key{Group: webappv1.GroupVersion.Group, Kind: "SimpleWebApp", Namespace: namespace, Name: name}
}

// write patches swa's status to next when it differs, with swa's
// resourceVersion as a precondition (a conflict is a stale read: the pass
// runs again on a fresh copy). swa then holds next; after an error, its old
// status.
func (w *statusWriter) write(ctx context.Context, swa *webappv1.SimpleWebApp, next webappv1.SimpleWebAppStatus) (bool, error) {
	if reflect.DeepEqual(swa.Status, next) {
		return false, nil
	}
	before := swa.DeepCopy()
	swa.Status = next
	if err := w.client.Status().Patch(ctx, swa, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		swa.Status = before.Status
		if apierrors.IsConflict(err) {
			return false, step.ErrStaleRead
		}
		return false, err
	}
	w.recorded(swa)
	return true, nil
}

// recorded notes a write of swa (status, or its ApplySet metadata): until
// the cache shows it, the cached copy is behind.
func (w *statusWriter) recorded(swa *webappv1.SimpleWebApp) {
	w.writes.Record(appKey(swa.Namespace, swa.Name), swa)
}

// behind reports whether the cached swa predates the operator's own last
// write of it: acting on it could forget what that write recorded.
func (w *statusWriter) behind(swa *webappv1.SimpleWebApp) bool {
	return w.writes.Behind(appKey(swa.Namespace, swa.Name), swa)
}

// touch notes that a child of swa was written: the batch window counts from
// it too.
func (w *statusWriter) touch(swa *webappv1.SimpleWebApp) {
	w.writes.Touch(appKey(swa.Namespace, swa.Name))
}

func (w *statusWriter) forget(nn types.NamespacedName) {
	w.writes.Forget(appKey(nn.Namespace, nn.Name))
}

// mayWait reports whether the status change from swa's to next may wait
// for the batch window: the pass wrote nothing and has nothing to report (a
// write, a take-over, a prune, a roll-back, a failure), it was woken by a
// child event that is not a status change (the Deployment controller's
// revision annotation, the echo of our own write) within the window of our
// last write, and found only the roll-out's progress moved or the
// Deployment's controller not yet caught up with its generation. The state
// the batch ends in is written then, instead of one more write (or a
// Ready=False of a few milliseconds) now.
func (w *statusWriter) mayWait(swa *webappv1.SimpleWebApp, o outcome, next webappv1.SimpleWebAppStatus) bool {
	quiet := o.writes == 0 && len(o.takenOver) == 0 && len(o.pruned) == 0 && !o.rolledBack && o.failure == nil
	return quiet && (progressOnly(swa.Status, next) || awaitingObservation(o.workload)) &&
		w.writes.Within(appKey(swa.Namespace, swa.Name), w.batch)
}

// progressOnly reports whether next differs from cur only in a roll-out's
// progress: the pod counts and the conditions' messages, every condition
// keeping its status, reason and observed generation.
func progressOnly(cur, next webappv1.SimpleWebAppStatus) bool {
	if reflect.DeepEqual(cur, next) || len(cur.Conditions) != len(next.Conditions) {
		return false
	}
	n := *next.DeepCopy()
	n.Replicas, n.ReadyReplicas, n.UpdatedReplicas, n.PodsReady = cur.Replicas, cur.ReadyReplicas, cur.UpdatedReplicas, cur.PodsReady
	for i := range n.Conditions {
		c := meta.FindStatusCondition(cur.Conditions, n.Conditions[i].Type)
		if c == nil || c.Status != n.Conditions[i].Status || c.Reason != n.Conditions[i].Reason || c.ObservedGeneration != n.Conditions[i].ObservedGeneration {
			return false
		}
		n.Conditions[i].Message, n.Conditions[i].LastTransitionTime = c.Message, c.LastTransitionTime
	}
	return reflect.DeepEqual(cur, n)
}
