package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"example.com/simplewebapp-operator/controllers"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/render"
)

// Config is the operator's configuration: its flags, and what validate
// derives from them.
type Config struct {
	MetricsAddr    string
	MetricsSecure  bool
	MetricsCertDir string
	ProbeAddr      string
	PprofAddr      string

	LeaderElect   bool
	LeaderElectNS string
	LeaderElectID string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	ChannelsDir      string
	ChannelsPoll     time.Duration
	Workers          int
	StatusDelay      time.Duration
	StuckAfter       time.Duration
	Upgrades         int
	Shard            string
	WatchNamespaces  string
	RefusedPatches   string
	RenderCacheBytes string

	AllowedImages      string
	RequireImageDigest bool

	RolloutWaves     bool
	RolloutNamespace string
	RolloutPolicy    fleet.Policy
	RolloutEvery     time.Duration

	ShowVersion bool
	Zap         zap.Options

	// Derived by validate.
	shard            labels.Selector
	namespaces       []string
	images           render.ImagePolicy
	renderCacheBytes int64
}

// parseFlags reads the flags into a Config. Imported packages (kdp's
// loaders) register global flags this operator does not use, so it has a
// flag set of its own; controller-runtime's --kubeconfig is kept.
func parseFlags(args []string, inCluster bool) (*Config, error) {
	c := &Config{Zap: zap.Options{Development: false}}
	fs := flag.NewFlagSet("simplewebapp-operator", flag.ContinueOnError)
	if kubeconfig := flag.CommandLine.Lookup("kubeconfig"); kubeconfig != nil {
		fs.Var(kubeconfig.Value, kubeconfig.Name, kubeconfig.Usage)
	}
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint (HTTPS unless --metrics-secure=false); \"0\" disables it.")
	fs.BoolVar(&c.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, allowing only callers that may GET /metrics (authn/authz by the API server).")
	fs.StringVar(&c.MetricsCertDir, "metrics-cert-dir", "", "Directory with the metrics serving certificate (tls.crt, tls.key), reloaded when it changes, for example a mounted cert-manager Secret. Default: <tmp>/k8s-metrics-server/serving-certs; without files there a self-signed certificate is generated at start.")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	// In a pod (several replicas of a Deployment) a leader is elected unless
	// --leader-elect=false; out of cluster (make run, tests) it is off
	// unless --leader-elect.
	fs.BoolVar(&c.LeaderElect, "leader-elect", inCluster, "Elect a leader so only one of several replicas reconciles. Default: true when running in a pod (in-cluster config), else false.")
	fs.StringVar(&c.LeaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	fs.StringVar(&c.LeaderElectID, "leader-election-id", "simplewebapp-operator.example.com", "Name of the leader election Lease: one per shard (--watch-label-selector) when shards share a namespace.")
	fs.DurationVar(&c.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a Lease stays valid without renewal: when a leader dies without releasing it, another replica takes over after about this long.")
	fs.DurationVar(&c.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps retrying to renew its Lease before it gives up leadership (and exits).")
	fs.DurationVar(&c.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "How often candidates try to acquire, and the leader to renew, the Lease.")
	fs.StringVar(&c.ChannelsDir, "channels-dir", "", "Directory of channels and packages (the layout of channels/) that take precedence over the embedded ones; watched for changes, for example a mounted ConfigMap.")
	fs.DurationVar(&c.ChannelsPoll, "channels-poll-interval", 5*time.Second, "How often --channels-dir is checked for changes.")
	fs.IntVar(&c.Workers, "max-concurrent-reconciles", controllers.DefaultMaxConcurrentReconciles, "SimpleWebApps reconciled at once, so one slow SimpleWebApp never holds up the others.")
	fs.DurationVar(&c.StatusDelay, "status-batch-delay", 500*time.Millisecond, "How long a Deployment's status changes are collected before the SimpleWebApp's status is written once for them.")
	fs.IntVar(&c.Upgrades, "max-concurrent-upgrades", 20, "SimpleWebApps rolling out a new version at once, when a channel moves; the others keep their running version until a slot frees up. 0: unbounded.")
	fs.StringVar(&c.Shard, "watch-label-selector", "", "Reconcile only the SimpleWebApps this label selector matches, e.g. sharding.simplewebapp.example.com/key=shard1 (one operator Deployment per shard) or 'sharding.simplewebapp.example.com/key notin (shard1,shard2)' for the rest.")
	fs.StringVar(&c.WatchNamespaces, "watch-namespaces", "", "Comma-separated namespaces whose SimpleWebApps are reconciled (cache and watches only there), so the operator needs rights only there (Roles, see config/namespaced). Empty: every namespace.")
	fs.StringVar(&c.RefusedPatches, "refused-patches", controllers.RefusedPatchesRemove, "What becomes of patches that the running objects carry but the rules refuse now (after an operator upgrade or a narrower patch policy): \"remove\" applies the render without them; \"report\" leaves the running objects as they are and only reports (Stalled, an event, simplewebapp_refused_patches_live), for a migration window.")
	fs.StringVar(&c.RenderCacheBytes, "render-cache-bytes", "32Mi", "Bytes of renders kept for reconciles whose inputs did not change, as a quantity (33554432, 32Mi); templates get a quarter of it on top. A render that does not fit is rendered again when needed.")
	fs.StringVar(&c.AllowedImages, "allowed-images", "", "Comma-separated registry hosts (registry.example.com) and repository prefixes (docker.io/nginxinc/nginx-unprivileged) whose images SimpleWebApps may run, matched on whole path segments, Docker Hub short names expanded (nginx is docker.io/library/nginx); any other image is Stalled/ImageNotAllowed and nothing is applied. Empty or \"*\": any image.")
	fs.BoolVar(&c.RequireImageDigest, "require-image-digest", false, "Require every image of a SimpleWebApp to be pinned by digest (name@sha256:...); others are Stalled/ImageNotAllowed.")
	fs.StringVar(&c.PprofAddr, "pprof-bind-address", "", "Address of Go's /debug/pprof endpoints (heap profiles for the benchmark); empty disables them.")
	fs.DurationVar(&c.StuckAfter, "stuck-reconcile-timeout", 5*time.Minute, "/healthz fails (and the liveness probe restarts the operator) while a reconcile has run for longer than this.")
	fs.BoolVar(&c.RolloutWaves, "rollout-waves", true, "Roll a channel's new version out over the SimpleWebApps in waves, and halt it for the whole fleet when its upgrades fail (the --rollout-* flags). false: every SimpleWebApp upgrades as soon as an upgrade slot is free, each with its own gate only.")
	fs.StringVar(&c.RolloutNamespace, "rollout-namespace", "", "Namespace of the roll-out state ConfigMaps, shared by shards. Default: the pod's namespace, else --leader-election-namespace, else default.")
	fs.IntVar(&c.RolloutPolicy.FirstWave, "rollout-first-wave", fleet.DefaultPolicy.FirstWave, "SimpleWebApps that try a new version first (Ready ones without patches or image of their own, one per namespace while there are others, picked by a hash of the version and their UID).")
	fs.IntVar(&c.RolloutPolicy.SecondWavePercent, "rollout-second-wave-percent", fleet.DefaultPolicy.SecondWavePercent, "Percent of the SimpleWebApps wanting a version that try it in the second wave, once the first has it; then all the rest, --max-concurrent-upgrades at a time.")
	fs.IntVar(&c.RolloutPolicy.HaltFailures, "rollout-halt-failures", fleet.DefaultPolicy.HaltFailures, "Failed upgrades to a version that halt it for the fleet (with --rollout-halt-percent and --rollout-halt-namespaces). Only apps Ready again on their old version, without patches or image of their own, count.")
	fs.IntVar(&c.RolloutPolicy.HaltPercent, "rollout-halt-percent", fleet.DefaultPolicy.HaltPercent, "Least share, in percent, of the upgrades tried that must have failed to halt a version.")
	fs.IntVar(&c.RolloutPolicy.HaltNamespaces, "rollout-halt-namespaces", fleet.DefaultPolicy.HaltNamespaces, "Least number of namespaces the counted failures must be in to halt a version, so one tenant cannot halt everyone's upgrades.")
	fs.DurationVar(&c.RolloutPolicy.WaveTimeout, "rollout-wave-timeout", fleet.DefaultPolicy.WaveTimeout, "Longest an upgrade picked by a channel may take before it is rolled back, whatever its spec.upgradeTimeout, so no SimpleWebApp holds a wave longer.")
	fs.DurationVar(&c.RolloutEvery, "rollout-poll-interval", 2*time.Second, "How often a roll-out under way is looked at (the SimpleWebApps listed, waves and failures counted); idle, nothing is sent.")
	fs.BoolVar(&c.ShowVersion, "version", false, "Print the version, source revision and Go version, and exit.")
	c.Zap.BindFlags(fs)
	return c, fs.Parse(args)
}

// validate checks the configuration as a whole, before anything starts, and
// derives the label selector and namespaces. The first problem is the error.
func (c *Config) validate() error {
	if err := validateLeaderElection(c.LeaseDuration, c.RenewDeadline, c.RetryPeriod); err != nil {
		return err
	}
	var err error
	if c.shard, err = labels.Parse(c.Shard); err != nil {
		return fmt.Errorf("--watch-label-selector: %w", err)
	}
	if c.namespaces, err = parseNamespaces(c.WatchNamespaces); err != nil {
		return fmt.Errorf("--watch-namespaces: %w", err)
	}
	if c.RefusedPatches != controllers.RefusedPatchesRemove && c.RefusedPatches != controllers.RefusedPatchesReport {
		return fmt.Errorf("--refused-patches: %q is neither %q nor %q", c.RefusedPatches, controllers.RefusedPatchesRemove, controllers.RefusedPatchesReport)
	}
	if c.renderCacheBytes, err = parseBytes(c.RenderCacheBytes); err != nil {
		return fmt.Errorf("--render-cache-bytes: %w", err)
	}
	if c.images, err = render.ParseImagePolicy(c.AllowedImages, c.RequireImageDigest); err != nil {
		return fmt.Errorf("--allowed-images: %w", err)
	}
	if c.RolloutWaves {
		if err := c.RolloutPolicy.Validate(); err != nil {
			return err
		}
		if c.RolloutEvery <= 0 {
			return errors.New("--rollout-poll-interval must be positive")
		}
	}
	if c.ChannelsDir != "" {
		if _, err := os.Stat(c.ChannelsDir); err != nil { //nolint:gosec // G703: the administrator's own flag, read as given
			return fmt.Errorf("--channels-dir: %w", err)
		}
	}
	return nil
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

// parseNamespaces reads --watch-namespaces: a comma-separated list of
// namespace names, blanks ignored, sorted and without duplicates. Empty means
// every namespace (cluster-wide).
func parseNamespaces(list string) ([]string, error) {
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

// parseBytes reads a positive number of bytes written as a Kubernetes
// quantity: a plain integer, or with a suffix such as Mi or M.
func parseBytes(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, err
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("%q is not a positive number of bytes", s)
	}
	return q.Value(), nil
}

// runningInCluster reports whether the operator runs in a pod: the in-cluster
// client configuration (KUBERNETES_SERVICE_HOST/PORT and the mounted
// ServiceAccount token) is available.
func runningInCluster() bool {
	_, err := rest.InClusterConfig()
	return err == nil
}

// serviceAccountNamespace is where the pod's ServiceAccount token says the
// operator runs.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// rolloutNamespace is --rollout-namespace, else the pod's namespace, else
// the leader election's, else default.
func (c *Config) rolloutNamespace() string {
	if c.RolloutNamespace != "" {
		return c.RolloutNamespace
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b))
	}
	if c.LeaderElectNS != "" {
		return c.LeaderElectNS
	}
	return "default"
}

// rollout is the controllers' roll-out configuration, nil when off.
func (c *Config) rollout() *controllers.RolloutOptions {
	if !c.RolloutWaves {
		return nil
	}
	return &controllers.RolloutOptions{Namespace: c.rolloutNamespace(), Namespaces: c.namespaces, Policy: c.RolloutPolicy, Every: c.RolloutEvery,
		Sharded: !c.shard.Empty()}
}
