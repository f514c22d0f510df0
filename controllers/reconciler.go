// Package controllers reconciles SimpleWebApps with the declarative pattern:
// resolve a version of a manifest channel, render it with kustomize from the
// spec, server-side-apply it (only what changed), and report the workload's
// health. The stages live below it: internal/render, internal/apply,
// internal/guard; this package runs them (pipeline.go), computes status
// from what they did (status.go) and writes it (statuswriter.go).
package controllers

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/guard"
	"example.com/simplewebapp-operator/internal/metrics"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

// SimpleWebAppReconciler runs the pipeline (pipeline.go) for each
// SimpleWebApp and writes status from what it saw.
type SimpleWebAppReconciler struct {
	// Client reads from the cache, which holds only managed objects.
	Client   client.Client
	Recorder events.EventRecorder
	Channels render.Channels
	Renders  render.Renderer
	Applier  *apply.Applier
	// Status writes status: the only writer of it.
	Status *statusWriter
	// MaxConcurrentReconciles is how many SimpleWebApps are reconciled at
	// once, so a slow one never holds up the others (default
	// DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int
	// Upgrades bounds the version roll-outs in flight.
	Upgrades *upgradeSlots
	// Rollouts admits upgrades a channel picked by the fleet's waves
	// (internal/fleet); nil: every such upgrade is admitted at once.
	Rollouts *fleet.Store
	// WaveTimeout caps the upgrade timeout of channel upgrades (0: no cap).
	WaveTimeout time.Duration
	// Reach holds reconciles back while the API server cannot be reached.
	Reach *guard.APIReach
	// RefusedPatches: RefusedPatchesRemove (default) or RefusedPatchesReport.
	RefusedPatches string
	// Images are the container images a render may hold; checked after
	// every render, before anything is applied.
	Images render.ImagePolicy

	inflight sync.Map // reconcile.Request → start time (stuck reconciles fail liveness)
}

// Waits before a reconcile runs again.
const (
	// upgradeSlotRetry: a SimpleWebApp waiting for an upgrade slot or its
	// wave looks again. It is woken when it may go on (upgradeSlots.wake,
	// wakeFollowers); this is for a wake-up that went to one that no longer
	// needed it. Short waits would have every waiting SimpleWebApp of a
	// large fleet pass again and again while a channel move is under way.
	upgradeSlotRetry = 10 * time.Second
	// unansweredRetry is the least wait after a failure for want of an
	// answer: a restarting API server answers some requests (which lift
	// APIReach's hold) and drops others, and held reconciles retried at
	// APIReach's pace kept sending it requests it could not serve
	// (TestControlPlaneFaults).
	unansweredRetry = 2 * time.Second
)

// +kubebuilder:rbac:groups=example.com,resources=simplewebapps,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=example.com,resources=simplewebapps/status,verbs=get;patch
// +kubebuilder:rbac:groups=example.com,resources=simplewebapps/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create

// Reconcile only does bookkeeping: fetch, run the pipeline, write status,
// events and metrics from its outcome, and say when to come back.
func (r *SimpleWebAppReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if wait := r.Reach.Hold(); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil // the API server is down: no request into it
	}
	r.inflight.Store(req, time.Now())
	defer r.inflight.Delete(req)
	swa, err := r.fetch(ctx, req)
	if swa == nil {
		return ctrl.Result{}, err
	}
	// Events and metrics compare the status before the whole pass with the
	// one after it: the pass may write status on the way (inventory, a
	// version change).
	before, unanswered := swa.DeepCopy(), r.Reach.Unanswered()
	o := r.reconcile(ctx, swa)
	// Failed for want of an answer (even if the server has answered another
	// request since): retried after APIReach's wait, not through the work
	// queue's per-item backoff, which starts at 5 ms.
	rep := r.report(ctx, before, swa, o, func() bool { return r.Reach.Down() || r.Reach.Unanswered() > unanswered })
	return nextResult(o, rep, r.Reach.RetryIn(), r.Status.batch)
}

// fetch reads the SimpleWebApp from the cache: nil when it is gone (what
// is kept about it is dropped) or being deleted (owner references let the
// garbage collector remove its children).
func (r *SimpleWebAppReconciler) fetch(ctx context.Context, req ctrl.Request) (*webappv1.SimpleWebApp, error) {
	swa := &webappv1.SimpleWebApp{}
	if err := r.Client.Get(ctx, req.NamespacedName, swa); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.Forget(req.Namespace, req.Name)
			r.Status.forget(req.NamespacedName)
			r.Upgrades.release(req.NamespacedName)
		}
		return nil, client.IgnoreNotFound(err)
	}
	if !swa.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	return swa, nil
}

// reported is what report did with a pass's outcome.
type reported struct {
	// deferred: the status change waits for the batch window.
	deferred bool
	// err is the status write's error; unreachable: the pass or the write
	// failed because the API server went away.
	err         error
	unreachable bool
}

// report writes status from o, then events and metrics: not after a stale
// read (the cache catches up and the pass runs again), nor after a failure
// while the API server is unreachable (the write would fail too), nor when
// the change may wait for the batch window (statusWriter.mayWait).
func (r *SimpleWebAppReconciler) report(ctx context.Context, before, swa *webappv1.SimpleWebApp, o outcome, unreachable func() bool) reported {
	logger := log.FromContext(ctx)
	switch {
	case o.staleRead:
		if o.failure != nil {
			logger.V(1).Info("stale read, requeueing", "message", o.failure.Message)
		}
		return reported{}
	case o.failure != nil && unreachable():
		logger.V(1).Info("API server unreachable, retrying later", "message", o.failure.Message)
		return reported{unreachable: true}
	case o.failure != nil:
		logger.Info("reconcile failed", "reason", o.failure.Reason, "message", o.failure.Message, "terminal", o.failure.Terminal)
	}
	if o.writes > 0 {
		r.Status.touch(swa) // the batch window counts from writes of children too
	}
	next := computeStatus(swa, o)
	if r.Status.mayWait(swa, o, next) {
		return reported{deferred: true}
	}
	if _, err := r.Status.write(ctx, swa, next); err != nil {
		return reported{err: err, unreachable: unreachable()}
	}
	r.recordEvents(before, swa, o)
	recordMetrics(before, swa, o)
	return reported{}
}

// nextResult says when the SimpleWebApp is reconciled again.
func nextResult(o outcome, rep reported, retryIn, batch time.Duration) (ctrl.Result, error) {
	switch f := o.failure; {
	case o.staleRead || step.IsStaleRead(rep.err):
		return ctrl.Result{Requeue: true}, nil //nolint:staticcheck // rate-limited on purpose: the cache catches up
	case rep.unreachable:
		return ctrl.Result{RequeueAfter: max(retryIn, unansweredRetry)}, nil
	case rep.err != nil:
		return ctrl.Result{}, client.IgnoreNotFound(rep.err)
	case rep.deferred:
		return ctrl.Result{RequeueAfter: batch}, nil
	case f != nil && !f.Terminal && f.RetryAfter > 0:
		return ctrl.Result{RequeueAfter: f.RetryAfter}, nil
	case f != nil && !f.Terminal:
		return ctrl.Result{}, f // retried with backoff
	case o.waitingForUpgrade != "":
		return ctrl.Result{RequeueAfter: upgradeSlotRetry}, nil
	}
	return ctrl.Result{RequeueAfter: o.gate.requeueAfter}, nil
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
