package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions caches only the objects this operator manages, not every
// Deployment, Service and ConfigMap of the cluster, so the operator's memory
// grows with SimpleWebApps, not with the cluster.
func CacheOptions() cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagerName})}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: managed,
		&corev1.Service{}:    managed,
		&corev1.ConfigMap{}:  managed,
	}}
}

// Setup wires a SimpleWebAppReconciler reading packages from channels into mgr.
func Setup(mgr ctrl.Manager, channels Channels) (*SimpleWebAppReconciler, error) {
	dyn, err := dynamic.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	r := &SimpleWebAppReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder(ManagerName),
		Channels:  channels,
		Applier:   NewApplier(mgr.GetClient(), dyn, mgr.GetRESTMapper()),
	}
	return r, r.SetupWithManager(mgr)
}
