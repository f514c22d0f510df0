package controllers

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/guard"
	"example.com/simplewebapp-operator/internal/render"
)

// DefaultMaxConcurrentReconciles is the default number of workers. A
// reconcile mostly waits for the API server (a new app's pass is three round
// trips, one of them a Service create, whose cluster IP the API server
// allocates one at a time), so there are more workers than cores; the
// CPU-bound part, the render, runs at most GOMAXPROCS at a time
// (render.Cache), which also bounds its transient memory. How many keep two
// cores busy is measured in docs/benchmarks.md.
const DefaultMaxConcurrentReconciles = 16

// DefaultRenderCacheBytes is the default byte budget of the render cache.
const DefaultRenderCacheBytes = 32 << 20

// Options configure Setup.
type Options struct {
	// Channels are where versions come from (embedded, and a directory if set).
	Channels render.Channels
	// ChannelsPollInterval is how often Channels.Dir is checked for changes.
	ChannelsPollInterval time.Duration
	// MaxConcurrentReconciles: SimpleWebApps reconciled at once (default
	// DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int
	// StatusDelay batches a Deployment's status changes into one status
	// write (default 500ms).
	StatusDelay time.Duration
	// RenderCacheBytes bounds the bytes of renders remembered, and a quarter
	// of it those of templates (default DefaultRenderCacheBytes).
	RenderCacheBytes int64
	// RenderTimeout bounds one render (default 10s).
	RenderTimeout time.Duration
	// MaxConcurrentUpgrades bounds the SimpleWebApps rolling out a new
	// version at once (0: unbounded).
	MaxConcurrentUpgrades int
	// RefusedPatches says what becomes of patches the running objects carry
	// that are refused now: RefusedPatchesRemove (default) or
	// RefusedPatchesReport.
	RefusedPatches string
	// Reach is told about the manager client's requests (its Observe wraps
	// the rest.Config); nil: a new one that sees none (reconciles never wait).
	Reach *guard.APIReach
	// Images are the container images SimpleWebApps may run (the zero value:
	// any).
	Images render.ImagePolicy
	// Rollout rolls channel upgrades out over the fleet in waves, and halts
	// a version whose upgrades fail (internal/fleet); nil: off.
	Rollout *RolloutOptions
}

// RolloutOptions configure the fleet roll-outs.
type RolloutOptions struct {
	// Namespace holds the roll-out states (the operator's own).
	Namespace string
	// Namespaces are where SimpleWebApps are listed; empty: all.
	Namespaces []string
	Policy     fleet.Policy
	// Every is how often a roll-out under way is looked at.
	Every time.Duration
	// Sharded: this operator reconciles only some SimpleWebApps
	// (--watch-label-selector), so the fleet is listed from the API server
	// rather than from its cache.
	Sharded bool
}

// Setup wires a SimpleWebAppReconciler into mgr, and a ChannelWatcher when
// channels are also read from a directory.
func Setup(mgr ctrl.Manager, opts Options) (*SimpleWebAppReconciler, error) {
	if err := opts.Images.Validate(); err != nil {
		return nil, err
	}
	var rollouts *fleet.Store
	dyn, err := dynamic.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	if opts.StatusDelay <= 0 {
		opts.StatusDelay = 500 * time.Millisecond
	}
	if opts.RenderCacheBytes <= 0 {
		opts.RenderCacheBytes = DefaultRenderCacheBytes
	}
	events, err := guard.NewEventWriter(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), render.ManagerName)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(events); err != nil {
		return nil, err
	}
	// Waiting SimpleWebApps are woken when they may go on: a freed upgrade
	// slot, a roll-out's new wave, halt or resume.
	wakeEvents := make(chan event.GenericEvent)
	if opts.Rollout != nil {
		if rollouts, err = setupRollouts(mgr, *opts.Rollout, &opts.Channels); err != nil {
			return nil, err
		}
		rollouts.OnChange = wakeFollowers(mgr.GetClient(), wakeEvents)
	}
	applier := apply.NewApplier(mgr.GetClient(), mgr.GetAPIReader(), dyn, mgr.GetRESTMapper())
	r := &SimpleWebAppReconciler{
		Client:                  mgr.GetClient(),
		Recorder:                events,
		Channels:                opts.Channels,
		Renders:                 render.NewCache(opts.RenderCacheBytes, opts.RenderTimeout),
		Applier:                 applier,
		Status:                  &statusWriter{client: mgr.GetClient(), writes: applier.Writes, batch: opts.StatusDelay},
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		Upgrades:                &upgradeSlots{max: opts.MaxConcurrentUpgrades, wake: wake(wakeEvents)},
		Reach:                   opts.Reach,
		RefusedPatches:          opts.RefusedPatches,
		Images:                  opts.Images,
		Rollouts:                rollouts,
	}
	if opts.Rollout != nil {
		r.WaveTimeout = opts.Rollout.Policy.WaveTimeout
	}
	if r.Reach == nil {
		r.Reach = guard.NewAPIReach()
	}
	var channelEvents chan event.GenericEvent
	if opts.Channels.Dir != nil {
		interval := opts.ChannelsPollInterval
		if interval <= 0 {
			interval = 5 * time.Second
		}
		channelEvents = make(chan event.GenericEvent)
		if err := mgr.Add(&render.ChannelWatcher{Dir: opts.Channels.Dir, Interval: interval, Reader: mgr.GetClient(), Events: channelEvents}); err != nil {
			return nil, err
		}
	}
	return r, r.SetupWithManager(mgr, channelEvents, wakeEvents)
}

// setupRollouts adds the Roller to mgr and makes channels pass over the
// versions it halts; the reconciler admits upgrades through the Store.
func setupRollouts(mgr ctrl.Manager, opts RolloutOptions, channels *render.Channels) (*fleet.Store, error) {
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	if opts.Namespace == "" {
		return nil, errors.New("the roll-out states need a namespace")
	}
	if opts.Every <= 0 {
		opts.Every = 2 * time.Second
	}
	// Writes, and a shard's lists: its cache holds only its own
	// SimpleWebApps, and the roll-out counts the whole fleet's.
	cl, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient()})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	store := fleet.NewStore()
	channels.Halts = store
	var apps client.Reader = mgr.GetClient()
	if opts.Sharded {
		apps = cl
	}
	roller := &fleet.Roller{Client: cl, Apps: apps, Paged: opts.Sharded, Clientset: cs, Namespace: opts.Namespace, Namespaces: opts.Namespaces, Store: store,
		Policy: opts.Policy, Every: opts.Every, OnTick: fleet.Report,
		NewWants: func() fleet.Wants { return fleet.WantsOf(*channels) }}
	return store, mgr.Add(roller)
}

// wakeFollowers returns a fleet.Store.OnChange that reconciles the
// SimpleWebApps following a channel when a roll-out admits others: those
// waiting for the version would otherwise look again only on their own,
// and those stalled after a rollback of it not at all. The cache holds only
// this shard's.
func wakeFollowers(reader client.Reader, events chan<- event.GenericEvent) func(map[string]bool) {
	return func(map[string]bool) {
		go func() {
			var list webappv1.SimpleWebAppList
			if err := reader.List(context.Background(), &list); err != nil {
				return
			}
			for i := range list.Items {
				if list.Items[i].Spec.Version == "" {
					events <- event.GenericEvent{Object: &list.Items[i]}
				}
			}
		}()
	}
}

// wake returns an upgradeSlots.wake that reconciles one SimpleWebApp.
func wake(events chan<- event.GenericEvent) func(types.NamespacedName) {
	return func(key types.NamespacedName) {
		swa := &webappv1.SimpleWebApp{}
		swa.Namespace, swa.Name = key.Namespace, key.Name
		// Not from the worker that freed the slot: the event source may be
		// busy, and the worker has a pass to finish.
		go func() { events <- event.GenericEvent{Object: swa} }()
	}
}
