package controllers

import (
	"context"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

// apply writes one render and the ApplySet parent, and records them in o.
// It reports success.
func (r *SimpleWebAppReconciler) apply(ctx context.Context, swa *webappv1.SimpleWebApp, rendered *render.Rendered, force bool, o *outcome) bool {
	// Everything already applied stays in the inventory until it is pruned,
	// including objects written before a failure.
	inv := slices.Clone(swa.Status.Inventory)
	if o.inventory != nil {
		inv = o.inventory
	}
	for _, ref := range inventoryOf(rendered.Objects) {
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
		o.fail(err, webappv1.ReasonApplyFailed)
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
		out, err := r.Applier.EnsureParent(ctx, swa, inv)
		parent <- parentWrite{out, err}
	}(swa.DeepCopy())
	res, err := r.Applier.Apply(ctx, swa, rendered, force)
	o.writes += res.Writes
	o.takenOver = append(o.takenOver, res.TakenOver...)
	if p := <-parent; p.out != nil {
		// Carry on with what the server holds now, so the status write
		// that follows does not conflict with this one.
		swa.ResourceVersion = p.out.GetResourceVersion()
		swa.Labels, swa.Annotations = p.out.GetLabels(), p.out.GetAnnotations()
		o.writes++
		r.Status.recorded(swa) // our own write of the parent: the cache will catch up
	} else if err == nil {
		err = p.err
	}
	if err != nil {
		o.fail(err, webappv1.ReasonApplyFailed)
		return false
	}
	o.applied, o.objects, o.workload = true, rendered.Objects, res.Workload
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
func (r *SimpleWebAppReconciler) announceVersionChange(ctx context.Context, swa *webappv1.SimpleWebApp, rel render.Release) error {
	if swa.Status.Version == "" || swa.Status.Version == rel.Version || !isReady(swa) {
		return nil
	}
	_, err := r.Status.write(ctx, swa, computeStatus(swa, outcome{announcing: true, release: rel, workload: r.cachedWorkload(ctx, swa)}))
	return err
}

// lastHealthy resolves the last healthy version, keeping the channel it was
// reached through, to apply instead of desired.
func (r *SimpleWebAppReconciler) lastHealthy(ctx context.Context, swa *webappv1.SimpleWebApp, desired render.Release) (render.Release, error) {
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
	next := swa.Status.DeepCopy()
	if predicted != nil {
		next = predicted.DeepCopy()
	}
	next.Inventory = slices.Clone(inv)
	wrote, err := r.Status.write(ctx, swa, *next)
	if err != nil && !step.IsStaleRead(err) {
		return false, step.ObjectError(err, "SimpleWebApp", swa.Name, "inventory status write")
	}
	return wrote, err
}

// predictApplied is the status a first apply of rendered ends in when it
// succeeds: the objects created, the Deployment as the API server returns a
// new one (generation 1, no status yet). It is nil when the SimpleWebApp
// already has a Deployment, whose next generation cannot be known before
// the write. If the apply then fails, the status write after it says so
// (and a crash in between leaves Reconciling=True, which the next pass
// corrects).
func predictApplied(swa *webappv1.SimpleWebApp, rendered *render.Rendered, inv []webappv1.ObjectReference, o outcome) *webappv1.SimpleWebAppStatus {
	if workloadName(swa.Status.Inventory) != "" || o.failure != nil {
		return nil
	}
	var workload *appsv1.Deployment
	for _, obj := range apply.DesiredObjects(swa, rendered) {
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
	o.gate = gateUpgrade(swa, o.release, o.heldBack, workload, time.Now(), 0) // a first apply: no upgrade
	st := computeStatus(swa, o)
	return &st
}
