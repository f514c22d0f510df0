package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types, as kstatus, `kubectl wait --for=condition=Ready`, Flux and
// Argo CD read them. At most one of Reconciling and Stalled is True.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
	// ConditionVersionWithdrawn is True while the SimpleWebApp runs a
	// version that was withdrawn after it moved there (reason
	// VersionWithdrawn): it keeps running it, Ready as before, until its
	// owner moves it. Absent otherwise.
	ConditionVersionWithdrawn = "VersionWithdrawn"
	// ConditionUpgradeHeld is True while a newer version of the channel is
	// halted for the fleet (reason VersionHalted): the SimpleWebApp keeps
	// its version, Ready as before, until a new version is shipped or the
	// halt is resumed. Absent otherwise.
	ConditionUpgradeHeld = "UpgradeHeld"
)

// Reasons of the conditions: the public contract of status. Each one has a
// section in docs/troubleshooting.md (a test checks it), and Terminal says
// which ones wait for a change of the spec or the channels instead of being
// retried.
const (
	// ReasonAvailable: every desired pod of the applied version is updated
	// and available (Ready=True).
	ReasonAvailable = "Available"
	// ReasonProgressing: the applied objects are rolling out (Reconciling=True).
	ReasonProgressing = "Progressing"
	// ReasonSuspended: spec.suspend is true; nothing is written to the
	// children. Ready still says whether the running app is available.
	ReasonSuspended = "Suspended"

	// ReasonChannelNotFound: spec.channel names no channel file.
	ReasonChannelNotFound = "ChannelNotFound"
	// ReasonChannelInvalid: the channel file cannot be read or parsed.
	ReasonChannelInvalid = "ChannelInvalid"
	// ReasonVersionNotFound: spec.version (or the channel's newest version)
	// has no package.
	ReasonVersionNotFound = "VersionNotFound"
	// ReasonRenderFailed: kustomize or a package directive failed, or the
	// render exceeded its size or time limits.
	ReasonRenderFailed = "RenderFailed"
	// ReasonOperatorTooOld: the package needs a newer operator
	// (addons.k8s.io/min-operator-version).
	ReasonOperatorTooOld = "OperatorTooOld"
	// ReasonPatchNotAllowed: spec.patches changes something the package does
	// not let users tune (see the package's patch-policy.yaml).
	ReasonPatchNotAllowed = "PatchNotAllowed"
	// ReasonPolicyViolation: a rendered object breaks the operator's security
	// floor (restricted Pod Security, Service exposure, volumes, ...).
	ReasonPolicyViolation = "PolicyViolation"
	// ReasonObjectNotOwned: an object with a rendered object's name exists
	// and is not controlled by this SimpleWebApp; it is left untouched.
	ReasonObjectNotOwned = "ObjectNotOwned"
	// ReasonApplyRejected: the API server refused an object for good
	// (forbidden, invalid); the message names the object and says why.
	ReasonApplyRejected = "ApplyRejected"
	// ReasonRolloutFailed: the Deployment exceeded its progress deadline.
	ReasonRolloutFailed = "RolloutFailed"
	// ReasonRolledBack: a new version did not become Ready within
	// spec.upgradeTimeout and the last healthy one was re-applied.
	ReasonRolledBack = "RolledBack"
	// ReasonImageNotAllowed: a rendered container image is outside the
	// registries and repositories the operator's --allowed-images lists.
	ReasonImageNotAllowed = "ImageNotAllowed"
	// ReasonRenderTimeout: rendering took longer than the operator allows;
	// it is not tried again until the spec or the package changes.
	ReasonRenderTimeout = "RenderTimeout"
	// ReasonVersionWithdrawn: the version is withdrawn by its channel or
	// package; no SimpleWebApp may move to it, and those running it are
	// told to move.
	ReasonVersionWithdrawn = "VersionWithdrawn"
	// ReasonVersionHalted: the channel's newest version failed on enough
	// SimpleWebApps, in enough namespaces, that the operator halted it for
	// the whole fleet (condition UpgradeHeld).
	ReasonVersionHalted = "VersionHalted"

	// ReasonApplyFailed: a write to the API server failed in a way that may
	// pass (a timeout, a conflict, the server unavailable); retried with
	// backoff.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonPruneFailed: an object the render no longer holds could not be
	// deleted; retried with backoff.
	ReasonPruneFailed = "PruneFailed"
	// ReasonFieldConflict: another field manager keeps changing fields the
	// operator owns; the message names it. The operator re-applies with
	// backoff until the object stays as rendered.
	ReasonFieldConflict = "FieldConflict"
)

// TerminalReasons are the reasons that mean "cannot proceed until the spec or
// the channels change": Stalled=True, and kstatus reports Failed.
var TerminalReasons = []string{
	ReasonChannelNotFound, ReasonChannelInvalid, ReasonVersionNotFound, ReasonRenderFailed,
	ReasonOperatorTooOld, ReasonPatchNotAllowed, ReasonPolicyViolation, ReasonObjectNotOwned,
	ReasonApplyRejected, ReasonRolloutFailed, ReasonRolledBack, ReasonImageNotAllowed,
	ReasonRenderTimeout, ReasonVersionWithdrawn,
}

// TransientReasons are retried with backoff: Reconciling=True, kstatus
// InProgress.
var TransientReasons = []string{ReasonApplyFailed, ReasonPruneFailed, ReasonFieldConflict}

// AllReasons lists every reason a condition of a SimpleWebApp may carry.
func AllReasons() []string {
	out := []string{ReasonAvailable, ReasonProgressing, ReasonSuspended}
	out = append(out, TerminalReasons...)
	return append(out, TransientReasons...)
}

// AnnotationReconcileRequestedAt asks for one reconcile when its value
// changes (any string, by convention an RFC 3339 timestamp). Flux's
// AnnotationFluxReconcileRequestedAt does too; RequestedReconcileAt says
// which of the two is the request. The handled value is echoed in
// status.lastHandledReconcileAt.
const AnnotationReconcileRequestedAt = "simplewebapp.example.com/reconcile-requested-at"

// AnnotationFluxReconcileRequestedAt is Flux's reconcile request
// (meta.ReconcileRequestAnnotation), honoured so that tools and habits made
// for Flux objects work on SimpleWebApps too.
const AnnotationFluxReconcileRequestedAt = "reconcile.fluxcd.io/requestedAt"

// RequestedReconcileAt is the reconcile request obj carries: the value of
// whichever of AnnotationReconcileRequestedAt and
// AnnotationFluxReconcileRequestedAt is set, and when both are, the later
// RFC 3339 time (a value that is not one counts as earlier than one that is;
// a tie goes to AnnotationReconcileRequestedAt). It depends on the
// annotations alone, so the watch, the pipeline and the render cache agree on
// it, and echoing it in status.lastHandledReconcileAt cannot make the two
// annotations take turns; a new request must therefore be later than the
// other annotation's, which a current timestamp is.
func RequestedReconcileAt(obj metav1.Object) string {
	ann := obj.GetAnnotations()
	ours, flux := ann[AnnotationReconcileRequestedAt], ann[AnnotationFluxReconcileRequestedAt]
	switch {
	case flux == "":
		return ours
	case ours == "" || later(flux, ours):
		return flux
	}
	return ours
}

// later reports whether a is an RFC 3339 time after b, counting a b that is
// not a time as earlier than any time.
func later(a, b string) bool {
	ta, err := time.Parse(time.RFC3339Nano, a)
	if err != nil {
		return false
	}
	tb, err := time.Parse(time.RFC3339Nano, b)
	return err != nil || ta.After(tb)
}
