package controllers

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// describeRef names an inventory entry in messages.
func describeRef(r webappv1.ObjectReference) string {
	return fmt.Sprintf("%s/%s", r.Kind, r.Name)
}

// recordEvents says what changed: a generation applied, a version moved, the
// app became available, fields taken back from another manager, objects
// pruned, or why a step failed.
func (r *SimpleWebAppReconciler) recordEvents(before, after *webappv1.SimpleWebApp, o outcome) {
	if f := o.failure; f != nil {
		// Once per failure, not once per retry: a transient failure retried
		// with backoff (or a fight over a field) would flood the events.
		old := meta.FindStatusCondition(before.Status.Conditions, webappv1.ConditionReady)
		if old == nil || old.Reason != f.Reason || old.ObservedGeneration != after.Generation || !strings.HasSuffix(old.Message, f.Message) {
			r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, f.Reason, "Reconcile", "generation %d: %s", after.Generation, f.Message)
		}
		return
	}
	if rp := o.refused; rp != nil {
		// Once, when the running objects lose what is refused.
		old := meta.FindStatusCondition(before.Status.Conditions, webappv1.ConditionStalled)
		if old == nil || old.Status != metav1.ConditionTrue || old.Message != rp.message() {
			r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, "RefusedPatchesRemoved", "Apply", "generation %d: %s", after.Generation, rp.message())
		}
	}
	if w := o.release.Withdrawn; w != nil && !meta.IsStatusConditionTrue(before.Status.Conditions, webappv1.ConditionVersionWithdrawn) {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, webappv1.ReasonVersionWithdrawn, "Resolve",
			"version %s is withdrawn (%s): it keeps running until spec.version or spec.channel moves it", w.Version, w.Reason)
	}
	if h := o.release.Halted; h != nil && !meta.IsStatusConditionTrue(before.Status.Conditions, webappv1.ConditionUpgradeHeld) {
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, webappv1.ReasonVersionHalted, "Resolve", "%s; version %s keeps running", h.Reason, o.release.Version)
	}
	if o.rolledBack {
		fu := after.Status.FailedUpgrade
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, webappv1.ReasonRolledBack, "Rollback",
			"version %s %s; rolled back to %s, which is not retried until the spec or the channel changes", fu.Version, fu.Message, after.Status.Version)
	}
	if up := after.Status.Upgrade; up != nil && before.Status.Upgrade == nil {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Upgrading", "Upgrade",
			"upgrading from %s to %s; rolled back if not Ready within %s", up.From, up.To, o.gate.timeout)
	}
	if len(o.takenOver) > 0 {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "DriftCorrected", "Apply",
			"removed fields that other field managers added: %s", strings.Join(o.takenOver, "; "))
	}
	if before.Status.AppliedGeneration != after.Status.AppliedGeneration || before.Status.Version != after.Status.Version {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Applied", "Apply",
			"applied version %s for generation %d: %s", after.Status.Version, after.Generation, describe(o.objects))
	}
	if len(o.pruned) > 0 {
		names := make([]string, 0, len(o.pruned))
		for _, p := range o.pruned {
			names = append(names, describeRef(p))
		}
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Pruned", "Prune", "deleted what the render no longer holds: %s", strings.Join(names, ", "))
	}
	if !isReady(before) && isReady(after) && !o.suspended {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, webappv1.ReasonAvailable, "Observe",
			"version %s: %d of %d pods ready", after.Status.Version, after.Status.ReadyReplicas, after.Status.Replicas)
	}
}

func isReady(swa *webappv1.SimpleWebApp) bool {
	return meta.IsStatusConditionTrue(swa.Status.Conditions, webappv1.ConditionReady)
}

func describe(objs []*unstructured.Unstructured) string {
	parts := make([]string, 0, len(objs))
	for _, o := range objs {
		parts = append(parts, o.GetKind()+"/"+o.GetName())
	}
	return strings.Join(parts, ", ")
}
