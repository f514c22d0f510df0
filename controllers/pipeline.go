package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// reconcile is the pipeline, each step failing with a typed reason:
//
//	suspend? → resolve → hold back a failed version → render → announce a
//	version change → apply → ApplySet parent → gate the upgrade (roll back)
//	→ prune once Ready
//
// It writes the children; status is computed from its outcome by the caller.
func (r *SimpleWebAppReconciler) reconcile(ctx context.Context, swa *webappv1.SimpleWebApp) (o outcome) {
	o.requestedAt = swa.Annotations[webappv1.AnnotationReconcileRequestedAt]
	force := o.requestedAt != "" && o.requestedAt != swa.Status.LastHandledReconcileAt
	defer func() {
		if o.workload == nil && o.failure != nil || o.suspended {
			// The last applied objects keep running: report their health.
			o.workload = r.cachedWorkload(ctx, swa)
		}
	}()
	if swa.Spec.Suspend {
		o.suspended = true
		return o
	}

	rel, err := r.Channels.Resolve(ctx, swa.Spec)
	if err != nil {
		o.failure = asStepError(err, webappv1.ReasonVersionNotFound)
		return o
	}
	if heldBack(swa, rel) {
		if rel, err = r.lastHealthy(ctx, swa, rel); err != nil {
			o.failure = asStepError(err, webappv1.ReasonVersionNotFound)
			return o
		}
		o.heldBack = true
	}
	key := types.NamespacedName{Namespace: swa.Namespace, Name: swa.Name}
	if isUpgrade(swa, rel) && !r.Upgrades.acquire(key, swa.Status.Upgrade != nil && swa.Status.Upgrade.To == rel.Version) {
		// No upgrade slot: keep the running version (and correct its drift)
		// until one frees up.
		running, err := r.Channels.Resolve(ctx, webappv1.SimpleWebAppSpec{Version: swa.Status.Version})
		if err != nil {
			o.failure = asStepError(err, webappv1.ReasonVersionNotFound)
			return o
		}
		running.Channel, running.ChannelRevision = swa.Status.Channel, ""
		rel, o.waitingForUpgrade = running, fmt.Sprintf("%s waits for an upgrade slot (%d upgrades in flight, --max-concurrent-upgrades)", rel.Version, r.Upgrades.inFlight())
	}
	o.release = rel
	rendered, err := r.Renders.Render(ctx, rel, swa)
	if err != nil {
		o.failure = asStepError(err, webappv1.ReasonRenderFailed)
		return o
	}
	if err := r.announceVersionChange(ctx, swa, rel); err != nil {
		o.failure, o.staleRead = asStepError(err, webappv1.ReasonApplyFailed), isStaleRead(err)
		return o
	}
	if !r.apply(ctx, swa, rendered, force, &o) {
		return o
	}

	o.gate = gateUpgrade(swa, rel, o.heldBack, o.workload, time.Now())
	if o.gate.rollback {
		back, err := r.lastHealthy(ctx, swa, rel)
		if err == nil {
			o.release = back
			rendered, err = r.Renders.Render(ctx, back, swa)
		}
		if err != nil {
			o.failure = asStepError(err, webappv1.ReasonVersionNotFound)
			return o
		}
		o.heldBack, o.rolledBack = true, true
		if !r.apply(ctx, swa, rendered, force, &o) {
			return o
		}
	}

	if o.gate.upgrade == nil {
		r.Upgrades.release(key) // done, rolled back, or never an upgrade
	}
	if done, _, _ := rollout(o.workload); done {
		remaining, pruned, err := r.Applier.Prune(ctx, swa, o.inventory, inventory(rendered.Objects))
		o.inventory, o.pruned = remaining, pruned
		if err != nil {
			o.failure, o.staleRead = asStepError(err, webappv1.ReasonPruneFailed), isStaleRead(err)
		}
	}
	return o
}

// isUpgrade: rel moves a SimpleWebApp that runs a healthy version to another.
func isUpgrade(swa *webappv1.SimpleWebApp, rel Release) bool {
	st := swa.Status
	return st.LastHealthyVersion != "" && st.Version != "" && rel.Version != st.Version && rel.Version != st.LastHealthyVersion
}

// apply writes one render and the ApplySet parent, and records them in o.
// It reports success.
func (r *SimpleWebAppReconciler) apply(ctx context.Context, swa *webappv1.SimpleWebApp, rendered *Rendered, force bool, o *outcome) bool {
	// Everything already applied stays in the inventory until it is pruned,
	// including objects written before a failure.
	inv := slices.Clone(swa.Status.Inventory)
	if o.inventory != nil {
		inv = o.inventory
	}
	for _, ref := range inventory(rendered.Objects) {
		if !slices.Contains(inv, ref) {
			inv = append(inv, ref)
		}
	}
	o.inventory = inv
	// Record the names before creating the objects: a crash between a
	// create and the status write at the end would otherwise leave an
	// object that no inventory lists, which nothing would ever prune.
	prior, predicted := swa.Status.DeepCopy(), predictApplied(swa, rendered, inv, *o)
	if wrote, err := r.recordInventory(ctx, swa, inv, predicted); err != nil {
		o.failure, o.staleRead = asStepError(err, webappv1.ReasonApplyFailed), isStaleRead(err)
		return false
	} else if wrote {
		o.writes++
		if predicted != nil {
			o.unconfirmed = prior
		}
	}
	// The ApplySet parent's metadata is written while the children are (as
	// kubectl's ApplySet, it may name kinds before their objects exist): it
	// is another object, and not on the critical path of a new app.
	type parentWrite struct {
		out *unstructured.Unstructured
		err error
	}
	parent := make(chan parentWrite, 1)
	go func(swa *webappv1.SimpleWebApp) {
		out, err := r.Applier.ensureParent(ctx, swa, inv)
		parent <- parentWrite{out, err}
	}(swa.DeepCopy())
	res, err := r.Applier.Apply(ctx, swa, rendered, force)
	o.writes += res.writes
	o.takenOver = append(o.takenOver, res.takenOver...)
	if p := <-parent; p.out != nil {
		// Carry on with what the server holds now, so the status write
		// that follows does not conflict with this one.
		swa.ResourceVersion = p.out.GetResourceVersion()
		swa.Labels, swa.Annotations = p.out.GetLabels(), p.out.GetAnnotations()
		o.writes++
		r.rememberStatus(swa) // our own write of the parent: the cache will catch up
	} else if err == nil {
		err = p.err
	}
	if err != nil {
		o.failure, o.staleRead = asStepError(err, webappv1.ReasonApplyFailed), isStaleRead(err)
		return false
	}
	o.applied, o.objects, o.workload = true, rendered.Objects, res.workload
	if o.workload == nil {
		o.workload = r.cachedWorkload(ctx, swa)
	}
	return true
}

// announceVersionChange writes Ready=False before a new version is applied.
// A channel can move a SimpleWebApp to another version without a new
// generation; without this its status would say Ready=True, current by its
// observedGeneration, while the new version rolls out. The status comes from
// computeStatus like every other.
func (r *SimpleWebAppReconciler) announceVersionChange(ctx context.Context, swa *webappv1.SimpleWebApp, rel Release) error {
	if swa.Status.Version == "" || swa.Status.Version == rel.Version || !isReady(swa) {
		return nil
	}
	return r.writeStatus(ctx, swa, outcome{announcing: true, release: rel, workload: r.cachedWorkload(ctx, swa)})
}

// lastHealthy resolves the last healthy version, keeping the channel it was
// reached through, to apply instead of desired.
func (r *SimpleWebAppReconciler) lastHealthy(ctx context.Context, swa *webappv1.SimpleWebApp, desired Release) (Release, error) {
	rel, err := r.Channels.Resolve(ctx, webappv1.SimpleWebAppSpec{Version: swa.Status.LastHealthyVersion})
	rel.Channel, rel.ChannelRevision = desired.Channel, desired.ChannelRevision
	return rel, err
}

// cachedWorkload is the Deployment of the inventory, from the cache.
func (r *SimpleWebAppReconciler) cachedWorkload(ctx context.Context, swa *webappv1.SimpleWebApp) *appsv1.Deployment {
	name := workloadName(swa.Status.Inventory)
	if name == "" {
		return nil
	}
	d := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: swa.Namespace, Name: name}, d); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil
		}
		return nil
	}
	return d
}

// recordInventory writes status.inventory = inv, with the resourceVersion
// as a precondition, when inv names objects that the recorded inventory
// does not. With a prediction (a first apply) it writes the whole status
// that the apply is expected to end in, so that the write after the apply
// finds nothing to change and is skipped: a new SimpleWebApp gets 2 status
// writes (this one, then Ready), not 3. Otherwise it changes only the
// inventory.
func (r *SimpleWebAppReconciler) recordInventory(ctx context.Context, swa *webappv1.SimpleWebApp, inv []webappv1.ObjectReference, predicted *webappv1.SimpleWebAppStatus) (bool, error) {
	missing := false
	for _, ref := range inv {
		if !slices.Contains(swa.Status.Inventory, ref) {
			missing = true
		}
	}
	if !missing {
		return false, nil
	}
	before := swa.DeepCopy()
	if predicted != nil {
		swa.Status = *predicted
	}
	swa.Status.Inventory = slices.Clone(inv)
	if err := r.Client.Status().Patch(ctx, swa, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		swa.Status = before.Status
		if apierrors.IsConflict(err) {
			return false, errStaleRead
		}
		return false, objectError(err, "SimpleWebApp", swa.Name, "inventory status write")
	}
	r.rememberStatus(swa)
	return true, nil
}

// predictApplied is the status a first apply of rendered ends in when it
// succeeds: the objects created, the Deployment as the API server returns a
// new one (generation 1, no status yet). It is nil when the SimpleWebApp
// already has a Deployment, whose next generation cannot be known before
// the write. If the apply then fails, the status write after it says so
// (and a crash in between leaves Reconciling=True, which the next pass
// corrects).
func predictApplied(swa *webappv1.SimpleWebApp, rendered *Rendered, inv []webappv1.ObjectReference, o outcome) *webappv1.SimpleWebAppStatus {
	if workloadName(swa.Status.Inventory) != "" || o.failure != nil {
		return nil
	}
	var workload *appsv1.Deployment
	for _, obj := range DesiredObjects(swa, rendered) {
		if obj.GroupVersionKind() != appsv1.SchemeGroupVersion.WithKind("Deployment") {
			continue
		}
		workload = &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, workload); err != nil {
			return nil
		}
		workload.Generation = 1
	}
	if workload == nil {
		return nil
	}
	o.applied, o.objects, o.inventory, o.workload = true, rendered.Objects, inv, workload
	o.gate = gateUpgrade(swa, o.release, o.heldBack, workload, time.Now())
	st := computeStatus(swa, o)
	return &st
}
