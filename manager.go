package main

import (
	"context"
	"crypto/tls"
	"os"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/controllers"
	"example.com/simplewebapp-operator/internal/guard"
	"example.com/simplewebapp-operator/internal/metricsauth"
	"example.com/simplewebapp-operator/internal/objcache"
	"example.com/simplewebapp-operator/internal/render"
)

// run starts the manager with the controller and runs it until ctx ends.
// Errors are logged here, each with what failed.
func run(ctx context.Context, cfg *Config, log logr.Logger) error {
	restCfg := ctrl.GetConfigOrDie()
	withFailpoints(restCfg)
	// Requests that get no answer hold reconciles back (and the start waits)
	// until the API server answers again: see guard.APIReach.
	reach := guard.NewAPIReach()
	restCfg.Wrap(reach.Observe)
	leaderCfg := fenced(restCfg, cfg)
	// The manager's first discovery request fails while the API server
	// (re)starts: wait for it to be ready rather than exit.
	if err := guard.WaitAPIReady(ctx, restCfg, 500*time.Millisecond); err != nil {
		log.Error(err, "API server not ready")
		return err
	}
	mgr, err := ctrl.NewManager(restCfg, managerOptions(cfg, leaderCfg))
	if err != nil {
		log.Error(err, "unable to create manager")
		return err
	}
	source := render.Channels{FS: channels.FS}
	if cfg.ChannelsDir != "" {
		source.Dir = os.DirFS(cfg.ChannelsDir)
	}
	reconciler, err := controllers.Setup(mgr, controllers.Options{
		Channels: source, ChannelsPollInterval: cfg.ChannelsPoll, MaxConcurrentReconciles: cfg.Workers,
		StatusDelay: cfg.StatusDelay, MaxConcurrentUpgrades: cfg.Upgrades, Reach: reach,
		RefusedPatches: cfg.RefusedPatches, Images: cfg.images, RenderCacheBytes: cfg.renderCacheBytes,
		Rollout: cfg.rollout(),
	})
	if err != nil {
		log.Error(err, "unable to set up controller")
		return err
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddHealthzCheck("reconcile", reconciler.Healthz(cfg.StuckAfter)))
	utilruntime.Must(mgr.AddReadyzCheck("readyz", healthz.Ping))
	// A CRD older than this operator would silently drop fields: refuse to
	// start, saying which (an uncached read; the manager has not started).
	// Started during an outage (restarted after losing the Lease to it), it
	// waits for the API server rather than exiting again.
	if err := guard.WaitReachable(ctx, reach, func(ctx context.Context) error {
		return guard.CheckCRD(ctx, mgr.GetAPIReader())
	}); err != nil {
		log.Error(err, "incompatible CRD")
		return err
	}
	log.Info("starting manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager exited")
		return err
	}
	return nil
}

// fenced returns the configuration of the leader election client, with the
// lease fence observing it and guarding every other request: a leader
// paused past its Lease (SIGSTOP, a frozen node) must not write when it runs
// again (guard.LeaseFence). Nil without leader election.
func fenced(restCfg *rest.Config, cfg *Config) *rest.Config {
	if !cfg.LeaderElect {
		return nil
	}
	fence := guard.NewLeaseFence(cfg.RenewDeadline)
	leaderCfg := rest.CopyConfig(restCfg)
	// JSON, so the fence can read the Lease holder from the answers.
	leaderCfg.ContentType, leaderCfg.AcceptContentTypes = "application/json", "application/json"
	leaderCfg.Wrap(fence.Observe)
	restCfg.Wrap(fence.Guard)
	return leaderCfg
}

// managerOptions are the manager's options for cfg.
func managerOptions(cfg *Config, leaderCfg *rest.Config) ctrl.Options {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(webappv1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme)) // the CRD check at start
	metricsOpts := metricsserver.Options{
		BindAddress:   cfg.MetricsAddr,
		SecureServing: cfg.MetricsSecure,
		CertDir:       cfg.MetricsCertDir,
		// HTTP/2 off: CVE-2023-44487/39325 (rapid reset), as kubebuilder does.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if cfg.MetricsSecure {
		metricsOpts.FilterProvider = metricsauth.Filter
	}
	return ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  cfg.ProbeAddr,
		PprofBindAddress:        cfg.PprofAddr,
		LeaderElection:          cfg.LeaderElect,
		LeaderElectionID:        cfg.LeaderElectID,
		LeaderElectionNamespace: cfg.LeaderElectNS,
		LeaderElectionConfig:    leaderCfg,
		LeaseDuration:           &cfg.LeaseDuration,
		RenewDeadline:           &cfg.RenewDeadline,
		RetryPeriod:             &cfg.RetryPeriod,
		// The process exits right after losing or releasing leadership.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         objcache.WithNamespaces(objcache.WithShard(objcache.CacheOptions(), cfg.shard), cfg.namespaces),
	}
}
