package controllers

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
)

// childEvents maps events of managed objects to their SimpleWebApp, so that
// only what can change the outcome runs the pipeline:
//   - create: ignored. The operator made the object (or the cache is
//     starting, and every SimpleWebApp is reconciled anyway);
//   - delete, and a change of spec, metadata or field managers (a hand
//     edit): reconciled at once, so drift is corrected within a second;
//   - a Deployment's status change (a roll-out progressing): reconciled after
//     statusDelay, so the many status updates of one roll-out make one status
//     write. Other kinds' status is not reported, so it is ignored.
//
// Only SimpleWebApps in apps (the cache, which holds this shard's) are
// enqueued: every shard caches every managed child, and a reconcile of
// another shard's SimpleWebApp would only find it missing.
type childEvents struct {
	writes      *apply.OwnWrites
	apps        client.Reader
	statusDelay time.Duration
}

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

func (h *childEvents) Create(context.Context, event.TypedCreateEvent[client.Object], requestQueue) {}

func (h *childEvents) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q requestQueue) {
	req, ok := h.owner(ctx, e.ObjectNew)
	if !ok {
		return
	}
	if changedBeyondStatus(e.ObjectOld, e.ObjectNew) {
		q.Add(req)
		return
	}
	if _, ok := e.ObjectNew.(*appsv1.Deployment); ok {
		q.AddAfter(req, h.statusDelay)
	}
}

func (h *childEvents) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q requestQueue) {
	if _, ok := ownerRequest(e.Object); ok {
		gvk, _ := kindOf(e.Object)
		h.writes.Forget(apply.Key{Group: gvk.Group, Kind: gvk.Kind, Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()})
	}
	if req, ok := h.owner(ctx, e.Object); ok {
		q.Add(req)
	}
}

func (h *childEvents) Generic(ctx context.Context, e event.TypedGenericEvent[client.Object], q requestQueue) {
	if req, ok := h.owner(ctx, e.Object); ok {
		q.Add(req)
	}
}

// owner is the SimpleWebApp that controls o, if it is one of this shard's.
// A failed read other than NotFound counts as ours: a spare reconcile is
// cheaper than a missed drift.
func (h *childEvents) owner(ctx context.Context, o client.Object) (reconcile.Request, bool) {
	req, ok := ownerRequest(o)
	if !ok || h.apps == nil {
		return req, ok
	}
	// Typed, so the SimpleWebApp informer that exists answers (a metadata
	// Get would start a second one).
	err := h.apps.Get(ctx, req.NamespacedName, &webappv1.SimpleWebApp{})
	return req, !apierrors.IsNotFound(err)
}

// ownerRequest is the SimpleWebApp that controls o.
func ownerRequest(o client.Object) (reconcile.Request, bool) {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "SimpleWebApp" || ref.APIVersion != webappv1.GroupVersion.String() {
		return reconcile.Request{}, false
	}
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}, true
}

// changedBeyondStatus reports whether an update changed more than status:
// the spec (generation; objects without one, such as ConfigMaps and
// Services, count every change), labels, annotations, owners, or the field
// managers of anything but status.
func changedBeyondStatus(old, new client.Object) bool {
	if new.GetGeneration() == 0 || old.GetGeneration() != new.GetGeneration() {
		return old.GetResourceVersion() != new.GetResourceVersion()
	}
	return !maps.Equal(old.GetLabels(), new.GetLabels()) ||
		!maps.Equal(old.GetAnnotations(), new.GetAnnotations()) ||
		!reflect.DeepEqual(old.GetOwnerReferences(), new.GetOwnerReferences()) ||
		!reflect.DeepEqual(specManagers(old), specManagers(new))
}

func specManagers(o client.Object) []metav1.ManagedFieldsEntry {
	return slices.DeleteFunc(slices.Clone(o.GetManagedFields()), func(e metav1.ManagedFieldsEntry) bool {
		return e.Subresource != ""
	})
}

// kindOf is the managed kind of a typed object.
func kindOf(o client.Object) (metav1.GroupVersionKind, bool) {
	for _, k := range render.ManagedKinds {
		if reflect.TypeOf(k.New()) == reflect.TypeOf(o) {
			return metav1.GroupVersionKind(k.GVK), true
		}
	}
	return metav1.GroupVersionKind{}, false
}
