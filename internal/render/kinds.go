package render

import (
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedKind is a kind of object a package may render. The list below is the
// one place that says which kinds the operator deploys: it drives the watches
// (Owns), the cache, the render's refusal of any other kind, and a test that
// checks every kind any package renders is here and in the generated role.
//
// A new kind needs three things (docs/adding-a-feature.md): an entry here, an
// RBAC marker below, and `make manifests`.
type ManagedKind struct {
	GVK schema.GroupVersionKind
	// New returns an empty typed object of the kind (for the cache and watches).
	New func() client.Object
	// ReadByWorkload: pods read objects of this kind when they start (a
	// volume, envFrom), so they are written before the Deployment. Everything
	// else is written together with it.
	ReadByWorkload bool
}

// RBAC for every managed kind: apply (create, patch), prune (delete), cache
// (get, list, watch). No update: the operator only server-side-applies.
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;patch;delete

// ManagedKinds lists every kind a package may render.
var ManagedKinds = []ManagedKind{
	{GVK: appsv1.SchemeGroupVersion.WithKind("Deployment"), New: func() client.Object { return &appsv1.Deployment{} }},
	{GVK: corev1.SchemeGroupVersion.WithKind("Service"), New: func() client.Object { return &corev1.Service{} }},
	{GVK: corev1.SchemeGroupVersion.WithKind("ConfigMap"), New: func() client.Object { return &corev1.ConfigMap{} }, ReadByWorkload: true},
	{GVK: policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), New: func() client.Object { return &policyv1.PodDisruptionBudget{} }},
	{GVK: autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"), New: func() client.Object { return &autoscalingv2.HorizontalPodAutoscaler{} }},
}

// LookupKind returns the entry for gvk, if the operator manages it.
func LookupKind(gvk schema.GroupVersionKind) (ManagedKind, bool) {
	for _, k := range ManagedKinds {
		if k.GVK == gvk {
			return k, true
		}
	}
	return ManagedKind{}, false
}

// LookupGroupKind is LookupKind by group and kind only (inventory entries
// carry no version).
func LookupGroupKind(group, kind string) (ManagedKind, bool) {
	for _, k := range ManagedKinds {
		if k.GVK.Group == group && k.GVK.Kind == kind {
			return k, true
		}
	}
	return ManagedKind{}, false
}
