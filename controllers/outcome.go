package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

// outcome is what one pass of the pipeline did and saw. Status is computed
// from it, and only from it, by computeStatus.
type outcome struct {
	release render.Release
	// applied: the render of release was applied (its objects are below).
	applied bool
	objects []*unstructured.Unstructured
	// inventory is what exists of this SimpleWebApp's objects after the pass
	// (the render plus what waits to be pruned); nil: unchanged.
	inventory []webappv1.ObjectReference
	failure   *step.Error
	workload  *appsv1.Deployment // live Deployment, if it exists

	suspended bool
	// announcing: about to apply a version other than the one running
	// (written before the apply, so Ready never stays True for the old one).
	announcing bool
	// waitingForUpgrade says why the running version was applied instead
	// of a newer one (no upgrade slot free).
	waitingForUpgrade string
	// requestedAt is the reconcile request handled (webappv1.RequestedReconcileAt).
	requestedAt string
	staleRead   bool
	// unconfirmed is the status before this pass wrote the one a first
	// apply was predicted to end in (recordInventory): when the apply did
	// not happen after all, status is computed from it again.
	unconfirmed *webappv1.SimpleWebAppStatus

	// refused: patches the running objects carried are refused now
	// (refused.go).
	refused *refusedPatches

	// Health-gated upgrades (upgrade.go).
	heldBack   bool // the desired version failed before: the last healthy one is applied
	rolledBack bool // this pass rolled back
	gate       gate

	// What the writes did, for events and metrics.
	writes    int
	takenOver []string
	pruned    []webappv1.ObjectReference
}

// fail records a failed step: err's reason, or reason when err has none.
func (o *outcome) fail(err error, reason string) {
	o.failure, o.staleRead = step.As(err, reason), step.IsStaleRead(err)
}
