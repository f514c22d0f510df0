// Package metrics defines the operator's own Prometheus metrics, served with
// controller-runtime's on the (secure) metrics endpoint.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"example.com/simplewebapp-operator/internal/version"
)

// The metrics, one per thing counted.
var (
	RenderDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "simplewebapp_render_duration_seconds",
		Help:    "Time to render a package version for one SimpleWebApp (kustomize in memory).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
	})
	RenderCacheHits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "simplewebapp_render_cache_hits_total",
		Help: "Reconciles that reused a render because its inputs (package files, spec) did not change.",
	})
	RenderCacheBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_render_cache_bytes",
		Help: "Bytes held by the render caches, by cache: renders (deflated JSON, at most --render-cache-bytes) and templates (JSON, at most a quarter of it).",
	}, []string{"cache"})
	Applies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "simplewebapp_applies_total",
		Help: "Passes over a SimpleWebApp's objects, by result: success (something was written), unchanged (nothing needed a write), error, conflict (a stale read, retried).",
	}, []string{"result"})
	Writes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "simplewebapp_object_writes_total",
		Help: "Writes (create, apply, field-manager take-over, ApplySet parent) of SimpleWebApps' objects.",
	})
	ObjectsApplied = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_objects_applied",
		Help: "Objects in the last successful apply of each SimpleWebApp.",
	}, []string{"namespace", "name"})
	Upgrades = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "simplewebapp_upgrades_total",
		Help: "Version changes of SimpleWebApps, by result (started, succeeded, rolled_back).",
	}, []string{"result"})
	Rollbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "simplewebapp_rollbacks_total",
		Help: "Upgrades rolled back to the last healthy version because they did not become Ready in time.",
	})
	Ready = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_ready",
		Help: "1 when the SimpleWebApp's Ready condition is True, else 0.",
	}, []string{"namespace", "name"})
	Stalled = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_stalled",
		Help: "1 when the SimpleWebApp is Stalled (cannot proceed without a change), else 0.",
	}, []string{"namespace", "name", "reason"})
	VersionWithdrawn = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_version_withdrawn",
		Help: "1 while the SimpleWebApp keeps running a version that is withdrawn (withdrawn.yaml), by version.",
	}, []string{"namespace", "name", "version"})
	VersionHalted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_version_halted",
		Help: "1 while a version (by content) is halted for the fleet because its upgrades failed.",
	}, []string{"version", "content"})
	RolloutWave = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_rollout_wave",
		Help: "The wave (1-based) a version's fleet roll-out is in; the last wave is every remaining SimpleWebApp.",
	}, []string{"version", "content"})
	RolloutApps = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_rollout_apps",
		Help: "SimpleWebApps of a version's fleet roll-out, by state: waiting (want it, not started), upgrading, on (Ready on it), failed (rolled back from it).",
	}, []string{"version", "content", "state"})
	RefusedLive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_refused_patches_live",
		Help: "1 while patches of the SimpleWebApp that the running objects carry are now refused, by action: removed (the render without them is applied) or reported (--refused-patches=report).",
	}, []string{"namespace", "name", "action"})
)

func init() {
	metrics.Registry.MustRegister(RenderDuration, RenderCacheHits, RenderCacheBytes, Applies, Writes, ObjectsApplied, Upgrades, Rollbacks, Ready, Stalled,
		VersionWithdrawn, VersionHalted, RolloutWave, RolloutApps, RefusedLive)
}

// RegisterBuildInfo serves simplewebapp_build_info{version,revision,goversion} 1,
// so that a dashboard or an alert can tell which build each replica runs.
func RegisterBuildInfo(revision, goVersion string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "simplewebapp_build_info",
		Help:        "Always 1; the labels name the operator's version, source revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version.Operator, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	metrics.Registry.MustRegister(g)
}

// Forget drops the series of a deleted SimpleWebApp.
func Forget(ns, name string) {
	labels := prometheus.Labels{"namespace": ns, "name": name}
	ObjectsApplied.DeletePartialMatch(labels)
	Ready.DeletePartialMatch(labels)
	Stalled.DeletePartialMatch(labels)
	VersionWithdrawn.DeletePartialMatch(labels)
	RefusedLive.DeletePartialMatch(labels)
}
