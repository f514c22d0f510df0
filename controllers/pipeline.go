package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/render"
)

// reconcile is the pipeline, each step failing with a typed reason:
//
//	cache behind our own write? → suspend? → resolve (hold back a failed
//	version, wait for an upgrade slot) → render → announce a version
//	change → apply (inventory first, ApplySet parent alongside) → gate the
//	upgrade (roll back) → prune once Ready
//
// It writes the children; status is computed from its outcome by the caller.
func (r *SimpleWebAppReconciler) reconcile(ctx context.Context, swa *webappv1.SimpleWebApp) (o outcome) {
	o.requestedAt = webappv1.RequestedReconcileAt(swa)
	force := o.requestedAt != "" && o.requestedAt != swa.Status.LastHandledReconcileAt
	defer func() {
		if o.workload == nil && o.failure != nil || o.suspended {
			// The last applied objects keep running: report their health.
			o.workload = r.cachedWorkload(ctx, swa)
		}
	}()
	switch {
	case r.Status.behind(swa):
		// Our cached copy predates our own last write of it: acting on it
		// could forget what that write recorded. The cache catches up soon.
		o.staleRead = true
		return o
	case swa.Spec.Suspend:
		o.suspended = true
		return o
	}
	rel, err := r.resolve(ctx, swa, &o)
	if err != nil {
		o.fail(err, webappv1.ReasonVersionNotFound)
		return o
	}
	o.release = rel
	rendered, err := r.Renders.Render(ctx, rel, swa)
	if err == nil {
		err = r.Images.Check(rendered)
	}
	if err != nil {
		rendered, err = r.renderWithoutRefused(ctx, rel, swa, err, &o)
	}
	if err != nil {
		o.fail(err, webappv1.ReasonRenderFailed)
		return o
	}
	if err := r.announceVersionChange(ctx, swa, rel); err != nil {
		o.fail(err, webappv1.ReasonApplyFailed)
		return o
	}
	if !r.apply(ctx, swa, rendered, force, &o) {
		return o
	}
	if rendered, err = r.gate(ctx, swa, rendered, force, &o); err != nil || o.failure != nil {
		return o
	}
	r.prune(ctx, swa, rendered, &o)
	return o
}

// resolve picks the release to apply: the spec's version or channel's, the
// last healthy one instead of a version that was rolled back, the running
// one while no upgrade slot is free.
func (r *SimpleWebAppReconciler) resolve(ctx context.Context, swa *webappv1.SimpleWebApp, o *outcome) (render.Release, error) {
	rel, err := r.Channels.ResolveApp(ctx, swa)
	if err != nil {
		return rel, err
	}
	if render.HeldBack(swa, rel) {
		if rel, err = r.lastHealthy(ctx, swa, rel); err != nil {
			return rel, err
		}
		o.heldBack = true
	}
	key := types.NamespacedName{Namespace: swa.Namespace, Name: swa.Name}
	underWay := swa.Status.Upgrade != nil && swa.Status.Upgrade.To == rel.Version
	if r.Rollouts != nil && !o.heldBack && !underWay && fleet.RollsOut(swa, rel) {
		k, err := fleet.KeyOf(rel)
		if err != nil {
			return rel, err
		}
		if wait := r.Rollouts.Admit(k, key.String()); wait != "" {
			return r.keepRunning(ctx, swa, rel.Version+" "+wait, o)
		}
	}
	if !fleet.IsUpgrade(swa, rel) || r.Upgrades.acquire(key, underWay) {
		return rel, nil
	}
	return r.keepRunning(ctx, swa, fmt.Sprintf("%s waits for an upgrade slot (%d upgrades in flight, --max-concurrent-upgrades)", rel.Version, r.Upgrades.inFlight()), o)
}

// keepRunning resolves the running version instead of an upgrade that has
// to wait, and says why (its drift is still corrected meanwhile).
func (r *SimpleWebAppReconciler) keepRunning(ctx context.Context, swa *webappv1.SimpleWebApp, why string, o *outcome) (render.Release, error) {
	running, err := r.Channels.Resolve(ctx, webappv1.SimpleWebAppSpec{Version: swa.Status.Version})
	if err != nil {
		return running, err
	}
	running.Channel, running.ChannelRevision = swa.Status.Channel, ""
	o.waitingForUpgrade = why
	return running, nil
}

// gate runs the health gate over what was applied: it rolls back to the last
// healthy version (applying its render, which it returns) when the new one
// is not Ready in time, and frees the upgrade slot once the upgrade is over.
func (r *SimpleWebAppReconciler) gate(ctx context.Context, swa *webappv1.SimpleWebApp, rendered *render.Rendered, force bool, o *outcome) (*render.Rendered, error) {
	o.gate = gateUpgrade(swa, o.release, o.heldBack, o.workload, time.Now(), r.WaveTimeout)
	if o.gate.rollback {
		back, err := r.lastHealthy(ctx, swa, o.release)
		if err == nil {
			o.release = back
			rendered, err = r.Renders.Render(ctx, back, swa)
		}
		if err == nil {
			err = r.Images.Check(rendered)
		}
		if err != nil {
			o.fail(err, webappv1.ReasonVersionNotFound)
			return nil, err
		}
		o.heldBack, o.rolledBack = true, true
		if !r.apply(ctx, swa, rendered, force, o) {
			return rendered, nil
		}
	}
	if o.gate.upgrade == nil && o.waitingForUpgrade == "" {
		r.Upgrades.release(types.NamespacedName{Namespace: swa.Namespace, Name: swa.Name}) // done, rolled back, or never an upgrade
	}
	return rendered, nil
}

// prune deletes what the render no longer holds, once the roll-out is done.
func (r *SimpleWebAppReconciler) prune(ctx context.Context, swa *webappv1.SimpleWebApp, rendered *render.Rendered, o *outcome) {
	if done, _, _ := rollout(o.workload); !done {
		return
	}
	remaining, pruned, err := r.Applier.Prune(ctx, swa, o.inventory, inventoryOf(rendered.Objects))
	o.inventory, o.pruned = remaining, pruned
	if err != nil {
		o.fail(err, webappv1.ReasonPruneFailed)
	}
}
