package controllers

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

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
	setVersionWithdrawnCondition(&st, swa.Generation, o)
	setUpgradeHeldCondition(&st, swa.Generation, o)
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
	case o.refused != nil:
		return phase{kind: phaseStalled, reason: o.refused.refusal.Reason, message: o.refused.message()}
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
			timeout := o.gate.timeout
			if timeout == 0 { // no gate in this pass: the spec's
				timeout = upgradeTimeout(swa, o.release, 0)
			}
			msg = fmt.Sprintf("upgrading from %s to %s (rolled back if not Ready by %s): %s",
				up.From, up.To, upgradeDeadline(up, timeout).UTC().Format(time.RFC3339), msg)
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

// setVersionWithdrawnCondition says whether the version kept running is
// withdrawn. A pass that resolved no version leaves the condition as it was.
func setVersionWithdrawnCondition(st *webappv1.SimpleWebAppStatus, gen int64, o outcome) {
	switch w := o.release.Withdrawn; {
	case o.release.Version == "":
	case w != nil:
		setCondition(st, gen, webappv1.ConditionVersionWithdrawn, metav1.ConditionTrue, webappv1.ReasonVersionWithdrawn,
			fmt.Sprintf("version %s is withdrawn (%s): it keeps running until spec.version or spec.channel moves it", w.Version, w.Reason))
	default:
		meta.RemoveStatusCondition(&st.Conditions, webappv1.ConditionVersionWithdrawn)
	}
}

// setUpgradeHeldCondition says whether a halt of the channel's newest version
// holds the SimpleWebApp on the one it runs. A pass that resolved no version
// leaves the condition as it was.
func setUpgradeHeldCondition(st *webappv1.SimpleWebAppStatus, gen int64, o outcome) {
	switch h := o.release.Halted; {
	case o.release.Version == "":
	case h != nil:
		setCondition(st, gen, webappv1.ConditionUpgradeHeld, metav1.ConditionTrue, webappv1.ReasonVersionHalted,
			fmt.Sprintf("%s; version %s keeps running", h.Reason, o.release.Version))
	default:
		meta.RemoveStatusCondition(&st.Conditions, webappv1.ConditionUpgradeHeld)
	}
}
