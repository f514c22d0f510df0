package controllers

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// CacheOptions caches only the objects this operator manages, not every
// Deployment, Service and ConfigMap of the cluster, so the operator's memory
// grows with SimpleWebApps, not with the cluster.
func CacheOptions() cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagerName})}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&appsv1.Deployment{}:                     managed,
		&corev1.Service{}:                        managed,
		&corev1.ConfigMap{}:                      managed,
		&policyv1.PodDisruptionBudget{}:          managed,
		&autoscalingv2.HorizontalPodAutoscaler{}: managed,
	}}
}

// Options configure Setup.
type Options struct {
	// Channels are where versions come from (embedded, and a directory if set).
	Channels Channels
	// ChannelsPollInterval is how often Channels.Dir is checked for changes.
	ChannelsPollInterval time.Duration
}

// Setup wires a SimpleWebAppReconciler into mgr, and a ChannelWatcher when
// channels are also read from a directory.
func Setup(mgr ctrl.Manager, opts Options) (*SimpleWebAppReconciler, error) {
	dyn, err := dynamic.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	r := &SimpleWebAppReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder(ManagerName),
		Channels:  opts.Channels,
		Applier:   NewApplier(mgr.GetClient(), dyn, mgr.GetRESTMapper()),
	}
	var channelEvents chan event.GenericEvent
	if opts.Channels.Dir != nil {
		interval := opts.ChannelsPollInterval
		if interval <= 0 {
			interval = 5 * time.Second
		}
		channelEvents = make(chan event.GenericEvent)
		if err := mgr.Add(&ChannelWatcher{Dir: opts.Channels.Dir, Interval: interval, Reader: mgr.GetClient(), Events: channelEvents}); err != nil {
			return nil, err
		}
	}
	return r, r.SetupWithManager(mgr, channelEvents)
}
