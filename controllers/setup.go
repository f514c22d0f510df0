package controllers

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// CacheOptions caches only the objects this operator manages (ManagedKinds
// with its managed-by label), not every Deployment, Service and ConfigMap of
// the cluster, and trims their field managers: the operator's memory grows
// with SimpleWebApps, not with the cluster.
func CacheOptions() cache.Options {
	managed := cache.ByObject{
		Label:     labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagerName}),
		Transform: trimManagedFields,
	}
	byObject := map[client.Object]cache.ByObject{}
	for _, k := range ManagedKinds {
		byObject[k.New()] = managed
	}
	byObject[&webappv1.SimpleWebApp{}] = cache.ByObject{Transform: trimApp}
	return cache.Options{ByObject: byObject}
}

// trimApp is the cache's transform of SimpleWebApps: nothing reads their
// field managers or kubectl's client-side copy of the spec, which together
// are larger than the rest of the object.
func trimApp(obj any) (any, error) {
	o, ok := obj.(client.Object)
	if !ok {
		return obj, nil
	}
	o.SetManagedFields(nil)
	if ann := o.GetAnnotations(); ann[lastApplied] != "" {
		ann = maps.Clone(ann)
		delete(ann, lastApplied)
		o.SetAnnotations(ann)
	}
	return o, nil
}

// lastApplied is kubectl's client-side apply annotation.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// DefaultMaxConcurrentReconciles is the default number of workers. A
// reconcile mostly waits for the API server (a new app's pass is three round
// trips, one of them a Service create, whose cluster IP the API server
// allocates one at a time), so there are more workers than cores; the
// CPU-bound part, the render, runs at most GOMAXPROCS at a time (RenderCache),
// which also bounds its transient memory. 16 kept the 2 cores of the bench
// machine busy (docs/benchmarks.md); 4 left them idle half the time.
const DefaultMaxConcurrentReconciles = 16

// Options configure Setup.
type Options struct {
	// Channels are where versions come from (embedded, and a directory if set).
	Channels Channels
	// ChannelsPollInterval is how often Channels.Dir is checked for changes.
	ChannelsPollInterval time.Duration
	// MaxConcurrentReconciles: SimpleWebApps reconciled at once (default
	// DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int
	// StatusDelay batches a Deployment's status changes into one status
	// write (default 500ms).
	StatusDelay time.Duration
	// RenderCacheSize is how many renders are remembered (default 4096).
	RenderCacheSize int
	// RenderTimeout bounds one render (default 10s).
	RenderTimeout time.Duration
	// MaxConcurrentUpgrades bounds the SimpleWebApps rolling out a new
	// version at once (0: unbounded).
	MaxConcurrentUpgrades int
	// Reach is told about the manager client's requests (its Observe wraps
	// the rest.Config); nil: a new one that sees none (reconciles never wait).
	Reach *APIReach
}

// WithShard limits opts to the SimpleWebApps that selector matches: an
// operator Deployment per shard label value splits a large fleet, as Flux
// shards its controllers (sharding.fluxcd.io/key). Moving a SimpleWebApp to
// another shard hands it over: the old shard's cache drops it, the new one
// finds its objects up to date and writes nothing.
func WithShard(opts cache.Options, selector labels.Selector) cache.Options {
	if selector == nil || selector.Empty() {
		return opts
	}
	if opts.ByObject == nil {
		opts.ByObject = map[client.Object]cache.ByObject{}
	}
	for o, by := range opts.ByObject {
		if _, ok := o.(*webappv1.SimpleWebApp); ok {
			delete(opts.ByObject, o)
			by.Label = selector
			opts.ByObject[&webappv1.SimpleWebApp{}] = by
			return opts
		}
	}
	opts.ByObject[&webappv1.SimpleWebApp{}] = cache.ByObject{Label: selector}
	return opts
}

// ParseNamespaces reads --watch-namespaces: a comma-separated list of
// namespace names, blanks ignored, sorted and without duplicates. Empty means
// every namespace (cluster-wide).
func ParseNamespaces(list string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, ns := range strings.Split(list, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" || seen[ns] {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
		}
		seen[ns] = true
		out = append(out, ns)
	}
	sort.Strings(out)
	return out, nil
}

// WithNamespaces limits opts to namespaces (--watch-namespaces): the cache
// lists and watches SimpleWebApps and their children only there, so the
// operator needs rights only there (Roles instead of a ClusterRole), and a
// SimpleWebApp elsewhere is never seen. Empty keeps the cluster-wide cache.
// Reads that bypass the cache (the CRD check at start) are unaffected.
func WithNamespaces(opts cache.Options, namespaces []string) cache.Options {
	if len(namespaces) == 0 {
		return opts
	}
	opts.DefaultNamespaces = map[string]cache.Config{}
	for _, ns := range namespaces {
		opts.DefaultNamespaces[ns] = cache.Config{}
	}
	return opts
}

// Setup wires a SimpleWebAppReconciler into mgr, and a ChannelWatcher when
// channels are also read from a directory.
func Setup(mgr ctrl.Manager, opts Options) (*SimpleWebAppReconciler, error) {
	dyn, err := dynamic.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	if opts.StatusDelay <= 0 {
		opts.StatusDelay = 500 * time.Millisecond
	}
	if opts.RenderCacheSize <= 0 {
		opts.RenderCacheSize = 4096
	}
	events, err := NewEventWriter(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme())
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(events); err != nil {
		return nil, err
	}
	r := &SimpleWebAppReconciler{
		Client:                  mgr.GetClient(),
		Recorder:                events,
		Channels:                opts.Channels,
		Renders:                 NewRenderCache(opts.RenderCacheSize, opts.RenderTimeout),
		Applier:                 NewApplier(mgr.GetClient(), mgr.GetAPIReader(), dyn, mgr.GetRESTMapper()),
		StatusDelay:             opts.StatusDelay,
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		Upgrades:                &upgradeSlots{max: opts.MaxConcurrentUpgrades},
		Reach:                   opts.Reach,
	}
	if r.Reach == nil {
		r.Reach = NewAPIReach()
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
