// Package controllers reconciles SimpleWebApps with the declarative pattern:
// resolve a version of a manifest channel, render it with kustomize from the
// spec, server-side-apply it (only what changed), and report the workload's
// health.
package controllers

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// upgradeSlotRetry is how often a SimpleWebApp waiting for an upgrade slot
// looks again.
const upgradeSlotRetry = 3 * time.Second

// SimpleWebAppReconciler runs the pipeline (pipeline.go) for each
// SimpleWebApp and writes status from what it saw.
type SimpleWebAppReconciler struct {
	// Client reads from the cache, which holds only managed objects.
	Client   client.Client
	Recorder events.EventRecorder
	Channels Channels
	Renders  *RenderCache
	Applier  *Applier
	// StatusDelay batches the status changes of a child (a Deployment
	// rolling out) into one status write.
	StatusDelay time.Duration
	// MaxConcurrentReconciles is how many SimpleWebApps are reconciled at
	// once, so a slow one never holds up the others (default
	// DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int
	// Upgrades bounds the version roll-outs in flight.
	Upgrades *upgradeSlots
	// Reach holds reconciles back while the API server cannot be reached.
	Reach *APIReach

	inflight      sync.Map // reconcile.Request → start time (stuck reconciles fail liveness)
	statusMu      sync.Mutex
	statusWritten map[types.NamespacedName]ownWrite // our last write of each SimpleWebApp
}

// unansweredRetry is the least wait before a reconcile that failed for want
// of an answer runs again (TestControlPlaneFaults: with APIReach's 0.5 s,
// the held reconciles of 5 apps sent up to 6 unserved requests/s into a
// restarting API server).
const unansweredRetry = 2 * time.Second

// ownWrite is the operator's last write of a SimpleWebApp (its status or its
// ApplySet metadata: resourceVersion), and when it last wrote it or a child.
type ownWrite struct {
	resourceVersion uint64
	at              time.Time
}

// +kubebuilder:rbac:groups=example.com,resources=simplewebapps,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=example.com,resources=simplewebapps/status,verbs=get;patch
// +kubebuilder:rbac:groups=example.com,resources=simplewebapps/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create

// Reconcile only does bookkeeping: fetch, run the pipeline, write status,
// events and metrics from its outcome.
func (r *SimpleWebAppReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if wait := r.Reach.Hold(); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil // the API server is down: no request into it
	}
	r.inflight.Store(req, time.Now())
	defer r.inflight.Delete(req)

	swa := &webappv1.SimpleWebApp{}
	if err := r.Client.Get(ctx, req.NamespacedName, swa); err != nil {
		if apierrors.IsNotFound(err) {
			forgetMetrics(req.Namespace, req.Name)
			r.forgetStatus(req.NamespacedName)
			r.Upgrades.release(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !swa.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the children
	}
	if r.statusBehind(swa) {
		// Our cached copy predates our own last status write: acting on it
		// could forget what that write recorded. The cache catches up soon.
		return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // rate-limited on purpose
	}

	// Events and metrics compare the status before the whole pass with the
	// one after it: the pass may write status on the way (inventory, a
	// version change).
	before := swa.DeepCopy()
	unanswered := r.Reach.Unanswered()
	o := r.reconcile(ctx, swa)
	// Failed for want of an answer (even if the server has answered another
	// request since): retried after APIReach's wait, not through the work
	// queue's per-item backoff, which starts at 5 ms.
	unreachable := func() bool { return r.Reach.Down() || r.Reach.Unanswered() > unanswered }
	if o.staleRead {
		log.FromContext(ctx).V(1).Info("stale read, requeueing", "message", o.failure.Message)
		return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // rate-limited on purpose
	}
	if o.failure != nil && unreachable() {
		// The step failed because the API server went away: the status
		// write would fail too. Retried once it answers again, and not
		// sooner than unansweredRetry: a server that is still starting
		// answers some requests (which lift APIReach's hold) and drops
		// others.
		log.FromContext(ctx).V(1).Info("API server unreachable, retrying later", "message", o.failure.Message)
		return ctrl.Result{RequeueAfter: max(r.Reach.RetryIn(), unansweredRetry)}, nil
	}
	if o.failure != nil {
		log.FromContext(ctx).Info("reconcile failed", "reason", o.failure.Reason, "message", o.failure.Message, "terminal", o.failure.Terminal)
	}
	if o.writes > 0 {
		r.touch(req.NamespacedName) // the batch window counts from writes of children too
	}
	if o.writes == 0 && len(o.takenOver) == 0 && len(o.pruned) == 0 && !o.rolledBack && o.failure == nil &&
		(progressOnly(swa.Status, computeStatus(swa, o)) || awaitingObservation(o.workload)) &&
		r.wroteWithin(req.NamespacedName, r.StatusDelay) {
		// A pass that wrote nothing, woken early by a child event that is
		// not a status change (the Deployment controller's revision
		// annotation, the echo of our own write), within the batch window
		// of our last write, and found only the roll-out's progress moved or
		// the Deployment's controller not yet caught up with its
		// generation: the state the batch ends in is written then, instead
		// of one more write (or a Ready=False of a few milliseconds) now. A
		// pass with something to report (a write, a take-over, a prune, a
		// failure) writes and reports at once.
		return ctrl.Result{RequeueAfter: r.StatusDelay}, nil
	}
	if err := r.writeStatus(ctx, swa, o); err != nil {
		if isStaleRead(err) {
			return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // rate-limited on purpose
		}
		if unreachable() {
			return ctrl.Result{RequeueAfter: max(r.Reach.RetryIn(), unansweredRetry)}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.recordEvents(before, swa, o)
	recordMetrics(before, swa, o)
	if o.failure != nil && !o.failure.Terminal {
		if o.failure.RetryAfter > 0 {
			return ctrl.Result{RequeueAfter: o.failure.RetryAfter}, nil
		}
		return ctrl.Result{}, o.failure // retried with backoff
	}
	if o.waitingForUpgrade != "" {
		return ctrl.Result{RequeueAfter: upgradeSlotRetry}, nil
	}
	return ctrl.Result{RequeueAfter: o.gate.requeueAfter}, nil
}

// writeStatus computes swa's status from o and patches it when it changed,
// with the resourceVersion as a precondition. swa holds the new status.
func (r *SimpleWebAppReconciler) writeStatus(ctx context.Context, swa *webappv1.SimpleWebApp, o outcome) error {
	before := swa.DeepCopy()
	swa.Status = computeStatus(swa, o)
	if reflect.DeepEqual(before.Status, swa.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, swa, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		swa.Status = before.Status
		if apierrors.IsConflict(err) {
			return errStaleRead
		}
		return err
	}
	r.rememberStatus(swa)
	return nil
}

func (r *SimpleWebAppReconciler) rememberStatus(swa *webappv1.SimpleWebApp) {
	rv, err := strconv.ParseUint(swa.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	if r.statusWritten == nil {
		r.statusWritten = map[types.NamespacedName]ownWrite{}
	}
	r.statusWritten[types.NamespacedName{Namespace: swa.Namespace, Name: swa.Name}] = ownWrite{rv, time.Now()}
}

func (r *SimpleWebAppReconciler) statusBehind(swa *webappv1.SimpleWebApp) bool {
	rv, err := strconv.ParseUint(swa.ResourceVersion, 10, 64)
	if err != nil {
		return false
	}
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return rv < r.statusWritten[types.NamespacedName{Namespace: swa.Namespace, Name: swa.Name}].resourceVersion
}

// touch records that the operator just wrote something of the SimpleWebApp
// (a child), for wroteWithin.
func (r *SimpleWebAppReconciler) touch(nn types.NamespacedName) {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	if r.statusWritten == nil {
		r.statusWritten = map[types.NamespacedName]ownWrite{}
	}
	w := r.statusWritten[nn]
	w.at = time.Now()
	r.statusWritten[nn] = w
}

// wroteWithin reports whether the operator wrote the SimpleWebApp or one of
// its children less than d ago.
func (r *SimpleWebAppReconciler) wroteWithin(nn types.NamespacedName, d time.Duration) bool {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	w, ok := r.statusWritten[nn]
	return ok && time.Since(w.at) < d
}

func (r *SimpleWebAppReconciler) forgetStatus(nn types.NamespacedName) {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	delete(r.statusWritten, nn)
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
	if o.rolledBack {
		fu := after.Status.FailedUpgrade
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, webappv1.ReasonRolledBack, "Rollback",
			"version %s %s; rolled back to %s, which is not retried until the spec or the channel changes", fu.Version, fu.Message, after.Status.Version)
	}
	if up := after.Status.Upgrade; up != nil && before.Status.Upgrade == nil {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Upgrading", "Upgrade",
			"upgrading from %s to %s; rolled back if not Ready within %s", up.From, up.To, upgradeTimeout(after))
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

// Healthz fails while a reconcile has been running for longer than stuckAfter:
// the liveness probe then restarts the operator instead of leaving a worker
// hung forever.
func (r *SimpleWebAppReconciler) Healthz(stuckAfter time.Duration) func(*http.Request) error {
	return func(*http.Request) error {
		var stuck error
		r.inflight.Range(func(k, v any) bool {
			if since := time.Since(v.(time.Time)); since > stuckAfter {
				stuck = fmt.Errorf("reconcile of %v running for %s", k, since.Round(time.Second))
				return false
			}
			return true
		})
		return stuck
	}
}

// reconcileRequested passes a change of the reconcile-requested-at annotation.
var reconcileRequested = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		key := webappv1.AnnotationReconcileRequestedAt
		return e.ObjectOld.GetAnnotations()[key] != e.ObjectNew.GetAnnotations()[key]
	},
}

// SetupWithManager watches SimpleWebApps (spec changes and requested
// reconciles) and the managed kinds they own (deletions and hand edits at
// once, a Deployment's status changes batched), and, when given, the events
// of a ChannelWatcher.
func (r *SimpleWebAppReconciler) SetupWithManager(mgr ctrl.Manager, channelEvents <-chan event.GenericEvent) error {
	workers := r.MaxConcurrentReconciles
	if workers <= 0 {
		workers = DefaultMaxConcurrentReconciles
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&webappv1.SimpleWebApp{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			reconcileRequested))).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Named("simplewebapp")
	children := &childEvents{applier: r.Applier, apps: mgr.GetCache(), statusDelay: r.StatusDelay}
	for _, k := range ManagedKinds {
		b = b.WatchesRawSource(source.Kind(mgr.GetCache(), k.New(), handler.TypedEventHandler[client.Object, ctrl.Request](children)))
	}
	if channelEvents != nil {
		b = b.WatchesRawSource(source.Channel(channelEvents, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}
