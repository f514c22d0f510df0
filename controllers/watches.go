package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

// reconcileRequested passes a change of the reconcile request (ours or
// Flux's annotation, as webappv1.RequestedReconcileAt reads them): a change
// of an annotation that does not change the request would reconcile nothing.
var reconcileRequested = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return webappv1.RequestedReconcileAt(e.ObjectOld) != webappv1.RequestedReconcileAt(e.ObjectNew)
	},
}

// SetupWithManager watches SimpleWebApps (spec changes and requested
// reconciles) and the managed kinds they own (deletions and hand edits at
// once, a Deployment's status changes batched), and, when given, the events
// of a ChannelWatcher and the wake-ups of waiting SimpleWebApps.
func (r *SimpleWebAppReconciler) SetupWithManager(mgr ctrl.Manager, channelEvents, wakeEvents <-chan event.GenericEvent) error {
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
	children := &childEvents{writes: r.Applier.Writes, apps: mgr.GetCache(), statusDelay: r.Status.batch}
	for _, k := range render.ManagedKinds {
		b = b.WatchesRawSource(source.Kind(mgr.GetCache(), k.New(), handler.TypedEventHandler[client.Object, ctrl.Request](children)))
	}
	for _, events := range []<-chan event.GenericEvent{channelEvents, wakeEvents} {
		if events != nil {
			b = b.WatchesRawSource(source.Channel(events, &handler.EnqueueRequestForObject{}))
		}
	}
	return b.Complete(r)
}
