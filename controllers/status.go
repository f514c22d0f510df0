package controllers

import (
	"fmt"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// outcome is what one pass of the pipeline did and saw. Status is computed
// from it, and only from it, by computeStatus.
type outcome struct {
	release Release
	// applied: the render of release was applied (its objects are below).
	applied bool
	objects []*unstructured.Unstructured
	// inventory is what exists of this SimpleWebApp's objects after the pass
	// (the render plus what waits to be pruned); nil: unchanged.
	inventory []webappv1.ObjectReference
	failure   *StepError
	workload  *appsv1.Deployment // live Deployment, if it exists

	suspended bool
	// announcing: about to apply a version other than the one running
	// (written before the apply, so Ready never stays True for the old one).
	announcing bool
	// waitingForUpgrade says why the running version was applied instead
	// of a newer one (no upgrade slot free).
	waitingForUpgrade string
	// requestedAt is the reconcile-requested-at annotation handled.
	requestedAt string
	staleRead   bool
	// unconfirmed is the status before this pass wrote the one a first
	// apply was predicted to end in (recordInventory): when the apply did
	// not happen after all, status is computed from it again.
	unconfirmed *webappv1.SimpleWebAppStatus

	// Health-gated upgrades (upgrade.go).
	heldBack   bool // the desired version failed before: the last healthy one is applied
	rolledBack bool // this pass rolled back
	gate       gate

	// What the writes did, for events and metrics.
	writes    int
	takenOver []string
	pruned    []webappv1.ObjectReference
}

// computeStatus derives the whole status from the previous one and what this
// pass saw. Each part is set by a small function below.
func computeStatus(swa *webappv1.SimpleWebApp, o outcome) webappv1.SimpleWebAppStatus {
	st := *swa.Status.DeepCopy()
	if o.unconfirmed != nil && (!o.applied || o.failure != nil) {
		st = *o.unconfirmed.DeepCopy()
	}
	setObservedGeneration(&st, swa.Generation, o)
	setApplied(&st, swa.Generation, o)
	setWorkload(&st, o.workload)
	setLastHandledReconcileAt(&st, o)
	ph := phaseOf(swa, &st, o)
	setReadyCondition(&st, swa.Generation, ph)
	setReconcilingCondition(&st, swa.Generation, ph)
	setStalledCondition(&st, swa.Generation, ph)
	return st
}

// setObservedGeneration: the generation is processed when it was applied,
// failed for good, or is suspended; kstatus then reads the conditions. A
// transient failure leaves it, and Reconciling=True says "still working".
func setObservedGeneration(st *webappv1.SimpleWebAppStatus, gen int64, o outcome) {
	if o.failure == nil || o.failure.Terminal {
		st.ObservedGeneration = gen
	}
}

// setApplied records what was applied: only when this pass applied it.
func setApplied(st *webappv1.SimpleWebAppStatus, gen int64, o outcome) {
	if o.inventory != nil {
		st.Inventory = o.inventory
	}
	if !o.applied || o.failure != nil {
		return
	}
	st.AppliedGeneration = gen
	st.Channel = o.release.Channel
	st.Version = o.release.Version
	st.LastHealthyVersion = o.gate.lastHealthy
	st.Upgrade = o.gate.upgrade
	st.FailedUpgrade = o.gate.failedUpgrade
}

// setWorkload copies the pod counts of the live Deployment.
func setWorkload(st *webappv1.SimpleWebAppStatus, d *appsv1.Deployment) {
	if d == nil {
		return
	}
	st.Replicas = d.Status.Replicas
	st.ReadyReplicas = d.Status.ReadyReplicas
	st.UpdatedReplicas = d.Status.UpdatedReplicas
	st.PodsReady = fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, desiredReplicas(d))
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
		st.Selector = sel.String()
	}
}

// setLastHandledReconcileAt echoes a requested reconcile once it was handled
// (not when it ends in a transient failure, which is retried).
func setLastHandledReconcileAt(st *webappv1.SimpleWebAppStatus, o outcome) {
	if o.requestedAt != "" && (o.failure == nil || o.failure.Terminal) && !o.announcing {
		st.LastHandledReconcileAt = o.requestedAt
	}
}

// phase is the state the conditions report, with its reason and message.
type phase struct {
	kind    phaseKind
	reason  string
	message string
	// ready: for phaseSuspended, whether the running app is available.
	ready bool
}

type phaseKind int

const (
	phaseAvailable   phaseKind = iota // Ready=True
	phaseProgressing                  // Reconciling=True
	phaseRetrying                     // Reconciling=True, after a transient failure
	phaseStalled                      // Stalled=True: waits for a change
	phaseSuspended                    // neither: nothing is being done on purpose
)

// phaseOf decides what the conditions say. st is the status computed so far.
func phaseOf(swa *webappv1.SimpleWebApp, st *webappv1.SimpleWebAppStatus, o outcome) phase {
	done, failed, msg := rollout(o.workload)
	switch f := o.failure; {
	case o.suspended:
		return phase{kind: phaseSuspended, reason: webappv1.ReasonSuspended, ready: done,
			message: "spec.suspend is true: nothing is written to the objects; " + msg}
	case f != nil && f.Terminal:
		return phase{kind: phaseStalled, reason: f.Reason, message: f.Message}
	case f != nil:
		return phase{kind: phaseRetrying, reason: f.Reason, message: "retrying: " + f.Message}
	case o.announcing:
		return phase{kind: phaseProgressing, reason: webappv1.ReasonProgressing,
			message: fmt.Sprintf("applying version %s (was %s)", o.release.Version, swa.Status.Version)}
	case o.heldBack:
		fu := st.FailedUpgrade
		return phase{kind: phaseStalled, reason: webappv1.ReasonRolledBack,
			message: fmt.Sprintf("version %s %s; running %s (%s); waiting for a change of the spec or the channel", fu.Version, fu.Message, st.Version, msg)}
	case failed:
		return phase{kind: phaseStalled, reason: webappv1.ReasonRolloutFailed, message: msg}
	case o.waitingForUpgrade != "":
		return phase{kind: phaseProgressing, reason: webappv1.ReasonProgressing, message: fmt.Sprintf("version %s: %s; %s", st.Version, msg, o.waitingForUpgrade)}
	case !done:
		if up := st.Upgrade; up != nil {
			msg = fmt.Sprintf("upgrading from %s to %s (rolled back if not Ready by %s): %s",
				up.From, up.To, upgradeDeadline(swa, up).UTC().Format(time.RFC3339), msg)
		}
		return phase{kind: phaseProgressing, reason: webappv1.ReasonProgressing, message: msg}
	}
	return phase{kind: phaseAvailable, reason: webappv1.ReasonAvailable, message: fmt.Sprintf("version %s: %s", st.Version, msg)}
}

func setCondition(st *webappv1.SimpleWebAppStatus, gen int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
}

func setReadyCondition(st *webappv1.SimpleWebAppStatus, gen int64, ph phase) {
	status := metav1.ConditionFalse
	if ph.kind == phaseAvailable || ph.kind == phaseSuspended && ph.ready {
		status = metav1.ConditionTrue
	}
	setCondition(st, gen, webappv1.ConditionReady, status, ph.reason, ph.message)
}

func setReconcilingCondition(st *webappv1.SimpleWebAppStatus, gen int64, ph phase) {
	status, msg := metav1.ConditionFalse, ""
	switch ph.kind {
	case phaseProgressing, phaseRetrying:
		status, msg = metav1.ConditionTrue, ph.message
	case phaseStalled:
		msg = "waiting for a change of the spec or the channel"
	}
	setCondition(st, gen, webappv1.ConditionReconciling, status, ph.reason, msg)
}

func setStalledCondition(st *webappv1.SimpleWebAppStatus, gen int64, ph phase) {
	status, msg := metav1.ConditionFalse, ""
	if ph.kind == phaseStalled {
		status, msg = metav1.ConditionTrue, ph.message
	}
	setCondition(st, gen, webappv1.ConditionStalled, status, ph.reason, msg)
}

// rollout reads a Deployment the way `kubectl rollout status` does: done when
// the controller has observed the latest spec and every desired pod is
// updated and available, with no old pods left.
func rollout(d *appsv1.Deployment) (done, failed bool, msg string) {
	if d == nil {
		return false, false, "waiting for the Deployment to be created"
	}
	desired := desiredReplicas(d)
	s := d.Status
	if s.ObservedGeneration < d.Generation {
		return false, false, fmt.Sprintf("waiting for the Deployment controller to observe generation %d", d.Generation)
	}
	for _, c := range s.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return false, true, fmt.Sprintf("Deployment %s exceeded its progress deadline: %s", d.Name, c.Message)
		}
	}
	switch {
	case s.UpdatedReplicas < desired:
		return false, false, fmt.Sprintf("%d of %d pods updated", s.UpdatedReplicas, desired)
	case s.Replicas > s.UpdatedReplicas:
		return false, false, fmt.Sprintf("%d old pods are terminating", s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < desired:
		return false, false, fmt.Sprintf("%d of %d pods available", s.AvailableReplicas, desired)
	}
	return true, false, fmt.Sprintf("%d of %d pods ready", s.ReadyReplicas, desired)
}

func desiredReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}

// inventory lists the objects as status.inventory entries.
func inventory(objs []*unstructured.Unstructured) []webappv1.ObjectReference {
	refs := make([]webappv1.ObjectReference, 0, len(objs))
	for _, o := range objs {
		refs = append(refs, webappv1.ObjectReference{Group: o.GroupVersionKind().Group, Kind: o.GetKind(), Name: o.GetName()})
	}
	return refs
}

// workloadName is the Deployment among the objects, or "" if there is none.
func workloadName(refs []webappv1.ObjectReference) string {
	for _, r := range refs {
		if r.Group == "apps" && r.Kind == "Deployment" {
			return r.Name
		}
	}
	return ""
}

// progressOnly reports whether next differs from cur only in a roll-out's
// progress: the pod counts and the conditions' messages, every condition
// keeping its status, reason and observed generation. Such a change may wait
// for the status batch (Reconcile); anything else is written at once.
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

// awaitingObservation: the Deployment's controller has not yet observed its
// latest generation, as for a moment after every write that bumps it.
func awaitingObservation(d *appsv1.Deployment) bool {
	return d != nil && d.Status.ObservedGeneration < d.Generation
}
