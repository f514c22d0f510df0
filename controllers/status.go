package controllers

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// outcome is what one pass of the pipeline learned; status is computed from it
// in one place (computeStatus).
type outcome struct {
	release  Release
	objects  []*unstructured.Unstructured // applied objects; nil unless applied
	failure  *StepError                   // the step that failed, if any
	workload *appsv1.Deployment           // live Deployment, if it exists
	// staleRead: a write conflicted with a newer version of the SimpleWebApp.
	staleRead bool

	// Health-gated upgrades (upgrade.go).
	heldBack      bool // the desired version failed before: the last healthy one is applied
	rolledBack    bool // this pass rolled back
	lastHealthy   string
	upgrade       *webappv1.UpgradeStatus
	failedUpgrade *webappv1.FailedUpgrade
	requeueAfter  time.Duration
}

// computeStatus derives the whole status from the previous status and what
// this pass saw. observedGeneration and the applied version/inventory only
// move when this generation was applied; conditions always say why.
func computeStatus(swa *webappv1.SimpleWebApp, o outcome) webappv1.SimpleWebAppStatus {
	st := *swa.Status.DeepCopy()
	gen := swa.Generation
	if o.failure == nil {
		st.ObservedGeneration = gen
		st.Channel = o.release.Channel
		st.Version = o.release.Version
		st.Inventory = inventory(o.objects)
		st.LastHealthyVersion = o.lastHealthy
		st.Upgrade = o.upgrade
		st.FailedUpgrade = o.failedUpgrade
	}
	if d := o.workload; d != nil {
		st.Replicas = d.Status.Replicas
		st.ReadyReplicas = d.Status.ReadyReplicas
		st.UpdatedReplicas = d.Status.UpdatedReplicas
		desired := int32(1)
		if d.Spec.Replicas != nil {
			desired = *d.Spec.Replicas
		}
		st.PodsReady = fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, desired)
		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
			st.Selector = sel.String()
		}
	}

	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen,
		})
	}
	switch f := o.failure; {
	case f != nil && f.Terminal:
		set(webappv1.ConditionStalled, metav1.ConditionTrue, f.Reason, f.Message)
		set(webappv1.ConditionReconciling, metav1.ConditionFalse, f.Reason, "waiting for a change of the spec or the channel")
		set(webappv1.ConditionReady, metav1.ConditionFalse, f.Reason, f.Message)
	case f != nil:
		set(webappv1.ConditionStalled, metav1.ConditionFalse, f.Reason, "")
		set(webappv1.ConditionReconciling, metav1.ConditionTrue, f.Reason, "retrying: "+f.Message)
		set(webappv1.ConditionReady, metav1.ConditionFalse, f.Reason, f.Message)
	default:
		done, failed, msg := rollout(o.workload)
		if up := st.Upgrade; up != nil {
			msg = fmt.Sprintf("upgrading from %s to %s (rolled back if not Ready by %s): %s",
				up.From, up.To, upgradeDeadline(swa, up).UTC().Format(time.RFC3339), msg)
		}
		switch {
		case o.heldBack:
			fu := st.FailedUpgrade
			why := fmt.Sprintf("version %s %s; running %s (%s); waiting for a change of the spec or the channel",
				fu.Version, fu.Message, st.Version, msg)
			set(webappv1.ConditionStalled, metav1.ConditionTrue, ReasonRolledBack, why)
			set(webappv1.ConditionReconciling, metav1.ConditionFalse, ReasonRolledBack, why)
			set(webappv1.ConditionReady, metav1.ConditionFalse, ReasonRolledBack, why)
		case failed:
			set(webappv1.ConditionStalled, metav1.ConditionTrue, ReasonRolloutFailed, msg)
			set(webappv1.ConditionReconciling, metav1.ConditionFalse, ReasonRolloutFailed, msg)
			set(webappv1.ConditionReady, metav1.ConditionFalse, ReasonRolloutFailed, msg)
		case !done:
			set(webappv1.ConditionStalled, metav1.ConditionFalse, ReasonProgressing, "")
			set(webappv1.ConditionReconciling, metav1.ConditionTrue, ReasonProgressing, msg)
			set(webappv1.ConditionReady, metav1.ConditionFalse, ReasonProgressing, msg)
		default:
			set(webappv1.ConditionStalled, metav1.ConditionFalse, ReasonAvailable, "")
			set(webappv1.ConditionReconciling, metav1.ConditionFalse, ReasonAvailable, "")
			set(webappv1.ConditionReady, metav1.ConditionTrue, ReasonAvailable,
				fmt.Sprintf("version %s: %s", st.Version, msg))
		}
	}
	return st
}

// announceVersionChange marks swa as not Ready before a new version is
// applied. A channel can move a SimpleWebApp to another version without a new
// generation, so without this its status would say Ready=True for the old
// version, current by its observedGeneration, while the new one rolls out.
// It reports whether it changed the status.
func announceVersionChange(swa *webappv1.SimpleWebApp, rel Release) bool {
	st := &swa.Status
	if st.Version == "" || st.Version == rel.Version || !isTrue(swa, webappv1.ConditionReady) {
		return false
	}
	msg := fmt.Sprintf("applying version %s (was %s)", rel.Version, st.Version)
	for typ, status := range map[string]metav1.ConditionStatus{
		webappv1.ConditionReady: metav1.ConditionFalse, webappv1.ConditionReconciling: metav1.ConditionTrue,
	} {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: ReasonProgressing, Message: msg, ObservedGeneration: swa.Generation,
		})
	}
	return true
}

// rollout reads a Deployment the way `kubectl rollout status` does: done when
// the controller has observed the latest spec and every desired pod is
// updated and available, with no old pods left.
func rollout(d *appsv1.Deployment) (done, failed bool, msg string) {
	if d == nil {
		return false, false, "waiting for the Deployment to be created"
	}
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
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
