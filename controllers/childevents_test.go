package controllers

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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

// Only changes beyond status run the pipeline at once.
func TestChangedBeyondStatus(t *testing.T) {
	base := func() *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Generation, d.ResourceVersion = 2, "10"
		d.Labels = map[string]string{"a": "b"}
		d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: render.ManagerName, Operation: metav1.ManagedFieldsOperationApply}}
		return d
	}
	statusOnly := base()
	statusOnly.ResourceVersion, statusOnly.Status.ReadyReplicas = "11", 3
	statusOnly.ManagedFields = append(statusOnly.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kube-controller-manager", Subresource: "status"})
	spec := base()
	spec.Generation, spec.ResourceVersion = 3, "11"
	label := base()
	label.ResourceVersion, label.Labels = "11", map[string]string{"a": "c"}
	edit := base()
	edit.ResourceVersion = "11"
	edit.ManagedFields = append(edit.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate})
	cm := &corev1.ConfigMap{}
	cm.ResourceVersion = "11"
	for name, tc := range map[string]struct {
		changed bool
		old     *appsv1.Deployment
		new     *appsv1.Deployment
	}{
		"status only": {false, base(), statusOnly},
		"spec":        {true, base(), spec},
		"labels":      {true, base(), label},
		"a hand edit": {true, base(), edit},
	} {
		if got := changedBeyondStatus(tc.old, tc.new); got != tc.changed {
			t.Errorf("%s: %v, want %v", name, got, tc.changed)
		}
	}
	if !changedBeyondStatus(&corev1.ConfigMap{}, cm) {
		t.Error("a kind without generation: every change counts")
	}
}

// shardCache answers Get as a cache restricted to one shard's SimpleWebApps
// does: NotFound for every other one.
type shardCache map[types.NamespacedName]bool

func (s shardCache) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	if !s[key] {
		return apierrors.NewNotFound(webappv1.GroupVersion.WithResource("simplewebapps").GroupResource(), key.Name)
	}
	return nil
}

func (s shardCache) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// Events of children enqueue only the SimpleWebApps of this shard: with
// --watch-label-selector every shard still caches every managed child, and
// the other shards' apps are not in its cache.
func TestChildEventsOnlyForThisShard(t *testing.T) {
	owner := func(name string) *webappv1.SimpleWebApp {
		return &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	}
	child := func(o client.Object, app string, gen int64, rv string) client.Object {
		o.SetNamespace("ns")
		o.SetName(app + "-web")
		o.SetGeneration(gen)
		o.SetResourceVersion(rv)
		o.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(owner(app), webappv1.GroupVersion.WithKind("SimpleWebApp"))})
		return o
	}
	h := &childEvents{
		writes: &apply.OwnWrites{},
		apps:   shardCache{{Namespace: "ns", Name: "mine"}: true},
	}
	for _, tc := range []struct {
		name string
		fire func(context.Context, requestQueue)
		want []string // enqueued SimpleWebApps
	}{
		{"deleted child of this shard's app", func(ctx context.Context, q requestQueue) {
			h.Delete(ctx, event.TypedDeleteEvent[client.Object]{Object: child(&corev1.Service{}, "mine", 0, "5")}, q)
		}, []string{"mine"}},
		{"deleted child of another shard's app", func(ctx context.Context, q requestQueue) {
			h.Delete(ctx, event.TypedDeleteEvent[client.Object]{Object: child(&corev1.Service{}, "theirs", 0, "5")}, q)
		}, nil},
		{"hand edit, this shard", func(ctx context.Context, q requestQueue) {
			h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: child(&appsv1.Deployment{}, "mine", 1, "5"), ObjectNew: child(&appsv1.Deployment{}, "mine", 2, "6")}, q)
		}, []string{"mine"}},
		{"hand edit, another shard", func(ctx context.Context, q requestQueue) {
			h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: child(&appsv1.Deployment{}, "theirs", 1, "5"), ObjectNew: child(&appsv1.Deployment{}, "theirs", 2, "6")}, q)
		}, nil},
		{"status change, this shard", func(ctx context.Context, q requestQueue) {
			h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: child(&appsv1.Deployment{}, "mine", 1, "5"), ObjectNew: child(&appsv1.Deployment{}, "mine", 1, "6")}, q)
		}, []string{"mine"}},
		{"status change, another shard", func(ctx context.Context, q requestQueue) {
			h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: child(&appsv1.Deployment{}, "theirs", 1, "5"), ObjectNew: child(&appsv1.Deployment{}, "theirs", 1, "6")}, q)
		}, nil},
		{"generic, another shard", func(ctx context.Context, q requestQueue) {
			h.Generic(ctx, event.TypedGenericEvent[client.Object]{Object: child(&corev1.ConfigMap{}, "theirs", 0, "5")}, q)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			tc.fire(t.Context(), q)
			var got []string
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req.Name)
				q.Done(req)
			}
			if len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
				t.Errorf("enqueued %v, want %v", got, tc.want)
			}
		})
	}
}
