// Package controllers reconciles SimpleWebApps with the declarative pattern:
// resolve a version of a manifest channel, render it with kustomize from the
// spec, server-side-apply it as an ApplySet, and report the workload's health.
package controllers

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// staleReadRetry is how long to wait before re-reading a SimpleWebApp whose
// cached copy was older than our own last write.
const staleReadRetry = 100 * time.Millisecond

// SimpleWebAppReconciler runs the pipeline resolve → render → apply (+prune)
// → observe for each SimpleWebApp, and writes status from what it saw.
type SimpleWebAppReconciler struct {
	Client client.Client
	// APIReader reads the workload uncached right after an apply, so status
	// never reports the previous generation's health as current.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	Channels  Channels
	Applier   *Applier
}

// +kubebuilder:rbac:groups=example.com,resources=simplewebapps,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=example.com,resources=simplewebapps/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=example.com,resources=simplewebapps/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile only does bookkeeping: fetch, run the pipeline, write status and
// events from its outcome.
func (r *SimpleWebAppReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	swa := &webappv1.SimpleWebApp{}
	if err := r.Client.Get(ctx, req.NamespacedName, swa); err != nil {
		if apierrors.IsNotFound(err) {
			forgetMetrics(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !swa.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the children
	}

	o := r.reconcile(ctx, swa)
	if o.staleRead {
		// Our cached copy of swa predates our own last write (kdp updates the
		// ApplySet labels on it): not a failure. The cache catches up within
		// milliseconds; read it again then.
		log.FromContext(ctx).V(1).Info("conflict on the SimpleWebApp, requeueing")
		return ctrl.Result{RequeueAfter: staleReadRetry}, nil
	}
	if o.failure != nil {
		log.FromContext(ctx).Info("reconcile failed", "reason", o.failure.Reason, "message", o.failure.Message, "terminal", o.failure.Terminal)
		// Still report the health of the last applied workload, which keeps running.
		if err := r.observe(ctx, swa, &o); err != nil {
			return ctrl.Result{}, err
		}
	}
	before := swa.DeepCopy()
	swa.Status = computeStatus(swa, o)
	r.recordEvents(before, swa, o)
	recordMetrics(before, swa, o)
	if !reflect.DeepEqual(before.Status, swa.Status) {
		if err := r.Client.Status().Patch(ctx, swa, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	if o.failure != nil && !o.failure.Terminal {
		return ctrl.Result{}, o.failure // retried with backoff
	}
	return ctrl.Result{RequeueAfter: o.requeueAfter}, nil
}

// reconcile is the pipeline: resolve → (hold back a failed version) → render
// → apply+prune → observe → gate the upgrade, rolling back if it failed. Each
// step fails with a typed reason.
func (r *SimpleWebAppReconciler) reconcile(ctx context.Context, swa *webappv1.SimpleWebApp) outcome {
	var o outcome
	rel, err := r.Channels.Resolve(ctx, swa.Spec)
	if err != nil {
		o.failure = asStepError(err, ReasonVersionNotFound)
		return o
	}
	if heldBack(swa, rel) {
		if rel, err = r.lastHealthy(ctx, swa, rel); err != nil {
			o.failure = asStepError(err, ReasonVersionNotFound)
			return o
		}
		o.heldBack = true
	}
	before := swa.DeepCopy()
	if announceVersionChange(swa, rel) {
		if err := r.Client.Status().Patch(ctx, swa, client.MergeFrom(before)); err != nil {
			o.staleRead = apierrors.IsConflict(err)
			o.failure = asStepError(err, ReasonApplyFailed)
			return o
		}
	}
	if !r.applyRelease(ctx, swa, rel, &o) {
		return o
	}
	if err := r.observe(ctx, swa, &o); err != nil {
		o.failure = asStepError(err, ReasonApplyFailed)
		return o
	}
	if gateUpgrade(swa, &o, time.Now()) {
		back, err := r.lastHealthy(ctx, swa, rel)
		if err != nil {
			o.failure = asStepError(err, ReasonVersionNotFound)
			return o
		}
		o.heldBack, o.rolledBack = true, true
		if r.applyRelease(ctx, swa, back, &o) {
			if err := r.observe(ctx, swa, &o); err != nil {
				o.failure = asStepError(err, ReasonApplyFailed)
			}
		}
	}
	return o
}

// lastHealthy resolves the last healthy version, keeping the channel it was
// reached through, to apply instead of desired.
func (r *SimpleWebAppReconciler) lastHealthy(ctx context.Context, swa *webappv1.SimpleWebApp, desired Release) (Release, error) {
	rel, err := r.Channels.Resolve(ctx, webappv1.SimpleWebAppSpec{Version: swa.Status.LastHealthyVersion})
	rel.Channel, rel.ChannelRevision = desired.Channel, desired.ChannelRevision
	return rel, err
}

// applyRelease renders rel for swa and applies it; it reports success.
func (r *SimpleWebAppReconciler) applyRelease(ctx context.Context, swa *webappv1.SimpleWebApp, rel Release, o *outcome) bool {
	o.release = rel
	start := time.Now()
	rendered, err := Render(rel, swa)
	renderDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		o.failure = asStepError(err, ReasonRenderFailed)
		return false
	}
	if err := r.Applier.Apply(ctx, swa, rendered); err != nil {
		o.staleRead = apierrors.IsConflict(err)
		applies.WithLabelValues(map[bool]string{true: "conflict", false: "error"}[o.staleRead]).Inc()
		o.failure = asStepError(err, ReasonApplyFailed)
		return false
	}
	applies.WithLabelValues("success").Inc()
	o.objects = rendered.Objects
	return true
}

// observe reads the live Deployment: the one just applied, or after a failure
// the last one applied, which keeps running.
func (r *SimpleWebAppReconciler) observe(ctx context.Context, swa *webappv1.SimpleWebApp, o *outcome) error {
	refs := swa.Status.Inventory
	if o.failure == nil {
		refs = inventory(o.objects)
	}
	o.workload = nil
	name := workloadName(refs)
	if name == "" {
		return nil
	}
	d := &appsv1.Deployment{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: swa.Namespace, Name: name}, d)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Deployment %s: %w", name, err)
	}
	o.workload = d
	return nil
}

// recordEvents says what changed: a generation applied, a version moved, the
// app became available, or why a step failed.
func (r *SimpleWebAppReconciler) recordEvents(before, after *webappv1.SimpleWebApp, o outcome) {
	if f := o.failure; f != nil {
		typ := corev1.EventTypeWarning
		r.Recorder.Eventf(after, nil, typ, f.Reason, "Reconcile", "generation %d: %s", after.Generation, f.Message)
		return
	}
	if o.rolledBack {
		fu := after.Status.FailedUpgrade
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, ReasonRolledBack, "Rollback",
			"version %s %s; rolled back to %s, which is not retried until the spec or the channel changes", fu.Version, fu.Message, after.Status.Version)
	}
	if up := after.Status.Upgrade; up != nil && before.Status.Upgrade == nil {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Upgrading", "Upgrade",
			"upgrading from %s to %s; rolled back if not Ready within %s", up.From, up.To, upgradeTimeout(after))
	}
	if before.Status.ObservedGeneration != after.Status.ObservedGeneration || before.Status.Version != after.Status.Version {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Applied", "Apply",
			"applied version %s for generation %d: %s", after.Status.Version, after.Generation, describe(o.objects))
	}
	wasReady := isTrue(before, webappv1.ConditionReady)
	if !wasReady && isTrue(after, webappv1.ConditionReady) {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, ReasonAvailable, "Observe",
			"version %s: %d of %d pods ready", after.Status.Version, after.Status.ReadyReplicas, after.Status.Replicas)
	}
}

func isTrue(swa *webappv1.SimpleWebApp, typ string) bool {
	for _, c := range swa.Status.Conditions {
		if c.Type == typ {
			return c.Status == "True"
		}
	}
	return false
}

func describe(objs []*unstructured.Unstructured) string {
	parts := make([]string, 0, len(objs))
	for _, o := range objs {
		parts = append(parts, o.GetKind()+"/"+o.GetName())
	}
	return strings.Join(parts, ", ")
}

// SetupWithManager watches SimpleWebApps and the objects they own, so a
// deleted or hand-edited child is put back at once (drift), and, when given,
// the events of a ChannelWatcher.
func (r *SimpleWebAppReconciler) SetupWithManager(mgr ctrl.Manager, channelEvents <-chan event.GenericEvent) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&webappv1.SimpleWebApp{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}).
		Named("simplewebapp")
	if channelEvents != nil {
		b = b.WatchesRawSource(source.Channel(channelEvents, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}
