// Command simplewebapp-operator runs the SimpleWebApp controller.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/controllers"
	"example.com/simplewebapp-operator/internal/metricsauth"
)

// revision is the source revision of this build, set by hack/build.sh
// (-ldflags -X main.revision=...); the version is controllers.OperatorVersion.
var revision = ""

func main() {
	var (
		metricsAddr   string
		probeAddr     string
		secureMetrics bool
		leaderElect   bool
		leaderElectNS string
		leaseDuration time.Duration
		renewDeadline time.Duration
		retryPeriod   time.Duration
		metricsCerts  string
		channelsDir   string
		channelsPoll  time.Duration
		workers       int
		statusDelay   time.Duration
		stuckAfter    time.Duration
		upgrades      int
		shard         string
		watchNS       string
		pprofAddr     string
		leaderElectID string
	)
	// Our own flag set: imported packages (kdp's loaders) register global flags
	// this operator does not use. controller-runtime's --kubeconfig is kept.
	flags := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	kubeconfig := flag.CommandLine.Lookup("kubeconfig")
	flags.Var(kubeconfig.Value, kubeconfig.Name, kubeconfig.Usage)
	flags.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint (HTTPS unless --metrics-secure=false); \"0\" disables it.")
	flags.BoolVar(&secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, allowing only callers that may GET /metrics (authn/authz by the API server).")
	flags.StringVar(&metricsCerts, "metrics-cert-dir", "", "Directory with the metrics serving certificate (tls.crt, tls.key), reloaded when it changes, for example a mounted cert-manager Secret. Default: <tmp>/k8s-metrics-server/serving-certs; without files there a self-signed certificate is generated at start.")
	flags.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	// In a pod (several replicas of a Deployment) a leader is elected unless
	// --leader-elect=false; out of cluster (make run, tests) it is off unless
	// --leader-elect.
	inCluster := runningInCluster()
	flags.BoolVar(&leaderElect, "leader-elect", inCluster, "Elect a leader so only one of several replicas reconciles. Default: true when running in a pod (in-cluster config), else false.")
	flags.StringVar(&leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	flags.StringVar(&leaderElectID, "leader-election-id", "simplewebapp-operator.example.com", "Name of the leader election Lease: one per shard (--watch-label-selector) when shards share a namespace.")
	flags.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a Lease stays valid without renewal: when a leader dies without releasing it, another replica takes over after about this long.")
	flags.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps retrying to renew its Lease before it gives up leadership (and exits).")
	flags.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often candidates try to acquire, and the leader to renew, the Lease.")
	flags.StringVar(&channelsDir, "channels-dir", "", "Directory of channels and packages (the layout of channels/) that take precedence over the embedded ones; watched for changes, for example a mounted ConfigMap.")
	flags.DurationVar(&channelsPoll, "channels-poll-interval", 5*time.Second, "How often --channels-dir is checked for changes.")
	flags.IntVar(&workers, "max-concurrent-reconciles", controllers.DefaultMaxConcurrentReconciles, "SimpleWebApps reconciled at once, so one slow SimpleWebApp never holds up the others.")
	flags.DurationVar(&statusDelay, "status-batch-delay", 500*time.Millisecond, "How long a Deployment's status changes are collected before the SimpleWebApp's status is written once for them.")
	flags.IntVar(&upgrades, "max-concurrent-upgrades", 20, "SimpleWebApps rolling out a new version at once, when a channel moves; the others keep their running version until a slot frees up. 0: unbounded.")
	flags.StringVar(&shard, "watch-label-selector", "", "Reconcile only the SimpleWebApps this label selector matches, e.g. sharding.simplewebapp.example.com/key=shard1 (one operator Deployment per shard) or 'sharding.simplewebapp.example.com/key notin (shard1,shard2)' for the rest.")
	flags.StringVar(&watchNS, "watch-namespaces", "", "Comma-separated namespaces whose SimpleWebApps are reconciled (cache and watches only there), so the operator needs rights only there (Roles, see config/namespaced). Empty: every namespace.")
	flags.StringVar(&pprofAddr, "pprof-bind-address", "", "Address of Go's /debug/pprof endpoints (heap profiles for the benchmark); empty disables them.")
	flags.DurationVar(&stuckAfter, "stuck-reconcile-timeout", 5*time.Minute, "/healthz fails (and the liveness probe restarts the operator) while a reconcile has run for longer than this.")
	showVersion := flags.Bool("version", false, "Print the version, source revision and Go version, and exit.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flags)
	_ = flags.Parse(os.Args[1:])
	rev := buildRevision()
	if *showVersion {
		fmt.Printf("simplewebapp-operator %s (revision %s, %s)\n", controllers.OperatorVersion, rev, goVersion())
		return
	}
	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // kdp's applylib logs through klog: same structured output
	setupLog := ctrl.Log.WithName("setup")
	setupLog.Info("simplewebapp-operator", "version", controllers.OperatorVersion, "revision", rev, "goVersion", goVersion())
	controllers.RegisterBuildInfo(rev, goVersion())
	if err := validateLeaderElection(leaseDuration, renewDeadline, retryPeriod); err != nil {
		setupLog.Error(err, "invalid leader election flags")
		os.Exit(1)
	}
	setupLog.Info("leader election", "enabled", leaderElect, "inCluster", inCluster,
		"leaseDuration", leaseDuration.String(), "renewDeadline", renewDeadline.String(), "retryPeriod", retryPeriod.String())

	shardSelector, err := labels.Parse(shard)
	if err != nil {
		setupLog.Error(err, "invalid --watch-label-selector")
		os.Exit(1)
	}

	namespaces, err := controllers.ParseNamespaces(watchNS)
	if err != nil {
		setupLog.Error(err, "invalid --watch-namespaces")
		os.Exit(1)
	}
	setupLog.Info("watching", "namespaces", namespaces, "clusterWide", len(namespaces) == 0)

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(webappv1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme)) // the CRD check at start

	metricsOpts := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		CertDir:       metricsCerts,
		// HTTP/2 off: CVE-2023-44487/39325 (rapid reset), as kubebuilder does.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if secureMetrics {
		metricsOpts.FilterProvider = metricsauth.Filter
	}

	ctx := ctrl.SetupSignalHandler()
	cfg := ctrl.GetConfigOrDie()
	exitAfterWrites(cfg)
	// A leader paused past its Lease (SIGSTOP, a frozen node) must not write
	// when it runs again: see controllers.LeaseFence.
	// Requests that get no answer hold reconciles back (and the start waits)
	// until the API server answers again: see controllers.APIReach.
	reach := controllers.NewAPIReach()
	cfg.Wrap(reach.Observe)
	var leaderCfg *rest.Config
	if leaderElect {
		fence := controllers.NewLeaseFence(renewDeadline)
		leaderCfg = rest.CopyConfig(cfg)
		// JSON, so the fence can read the Lease holder from the answers.
		leaderCfg.ContentType, leaderCfg.AcceptContentTypes = "application/json", "application/json"
		leaderCfg.Wrap(fence.Observe)
		cfg.Wrap(fence.Guard)
	}
	// The manager's first discovery request fails while the API server
	// (re)starts: wait for it to be ready rather than exit.
	if err := controllers.WaitAPIReady(ctx, cfg, 500*time.Millisecond); err != nil {
		setupLog.Error(err, "API server not ready")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        leaderElectID,
		LeaderElectionNamespace: leaderElectNS,
		LeaderElectionConfig:    leaderCfg,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retryPeriod,
		// The process exits right after losing or releasing leadership.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.WithNamespaces(controllers.WithShard(controllers.CacheOptions(), shardSelector), namespaces),
	})
	if err != nil {
		setupLog.Error(err, "unable to create manager")
		os.Exit(1)
	}
	source := controllers.Channels{FS: channels.FS}
	if channelsDir != "" {
		if _, err := os.Stat(channelsDir); err != nil {
			setupLog.Error(err, "--channels-dir")
			os.Exit(1)
		}
		source.Dir = os.DirFS(channelsDir)
	}
	reconciler, err := controllers.Setup(mgr, controllers.Options{
		Channels: source, ChannelsPollInterval: channelsPoll, MaxConcurrentReconciles: workers, StatusDelay: statusDelay,
		MaxConcurrentUpgrades: upgrades, Reach: reach,
	})
	if err != nil {
		setupLog.Error(err, "unable to set up controller")
		os.Exit(1)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddHealthzCheck("reconcile", reconciler.Healthz(stuckAfter)))
	utilruntime.Must(mgr.AddReadyzCheck("readyz", healthz.Ping))

	// A CRD older than this operator would silently drop fields: refuse to
	// start, saying which (an uncached read; the manager has not started).
	// Started during an outage (restarted after losing the Lease to it), it
	// waits for the API server rather than exiting again.
	if err := controllers.WaitReachable(ctx, reach, func(ctx context.Context) error {
		return controllers.CheckCRD(ctx, mgr.GetAPIReader())
	}); err != nil {
		setupLog.Error(err, "incompatible CRD")
		os.Exit(1)
	}

	setupLog.Info("starting manager")
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "manager exited")
		os.Exit(1)
	}
}

// buildRevision is the revision stamped by hack/build.sh, else the one the Go
// toolchain recorded (a plain `go build` in a git checkout), else "unknown".
func buildRevision() string {
	if revision != "" {
		return revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return s.Value[:12]
			}
		}
	}
	return "unknown"
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}

// runningInCluster reports whether the operator runs in a pod: the in-cluster
// client configuration (KUBERNETES_SERVICE_HOST/PORT and the mounted
// ServiceAccount token) is available.
func runningInCluster() bool {
	_, err := rest.InClusterConfig()
	return err == nil
}

// validateLeaderElection checks the Lease timings the way client-go's leader
// elector does, so bad flags fail at start rather than after the caches sync.
func validateLeaderElection(lease, renew, retry time.Duration) error {
	switch {
	case lease <= 0 || renew <= 0 || retry <= 0:
		return errors.New("--leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period must be positive")
	case lease <= renew:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be greater than --leader-elect-renew-deadline (%s)", lease, renew)
	case renew <= time.Duration(leaderelection.JitterFactor*float64(retry)):
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be greater than %.1f × --leader-elect-retry-period (%s)", renew, leaderelection.JitterFactor, retry)
	}
	return nil
}

// exitAfterWrites is a failpoint for crash-consistency tests only: with
// SWA_TEST_EXIT_AFTER_WRITES=k the process exits with status 137 (as if
// SIGKILLed) right after its k-th write request (POST, PUT, PATCH, DELETE)
// got its answer, wherever in a reconcile that falls.
func exitAfterWrites(cfg *rest.Config) {
	k, err := strconv.Atoi(os.Getenv("SWA_TEST_EXIT_AFTER_WRITES"))
	if err != nil || k <= 0 {
		return
	}
	var writes atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if req.Method != http.MethodGet && writes.Add(1) >= int64(k) {
				fmt.Fprintf(os.Stderr, "SWA_TEST_EXIT_AFTER_WRITES: exiting after write %d (%s %s)\n", k, req.Method, req.URL.Path)
				os.Exit(137)
			}
			return resp, err
		})
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
