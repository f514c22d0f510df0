package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// The operator's own metrics, served with controller-runtime's on the
// (secure) metrics endpoint.
var (
	renderDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "simplewebapp_render_duration_seconds",
		Help:    "Time to render a package version for one SimpleWebApp (kustomize in memory).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
	})
	renderCacheHits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "simplewebapp_render_cache_hits_total",
		Help: "Reconciles that reused a render because its inputs (package files, spec) did not change.",
	})
	applies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "simplewebapp_applies_total",
		Help: "Passes over a SimpleWebApp's objects, by result: success (something was written), unchanged (nothing needed a write), error, conflict (a stale read, retried).",
	}, []string{"result"})
	writes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "simplewebapp_object_writes_total",
		Help: "Writes (create, apply, field-manager take-over, ApplySet parent) of SimpleWebApps' objects.",
	})
	objectsApplied = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_objects_applied",
		Help: "Objects in the last successful apply of each SimpleWebApp.",
	}, []string{"namespace", "name"})
	upgrades = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "simplewebapp_upgrades_total",
		Help: "Version changes of SimpleWebApps, by result (started, succeeded, rolled_back).",
	}, []string{"result"})
	rollbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "simplewebapp_rollbacks_total",
		Help: "Upgrades rolled back to the last healthy version because they did not become Ready in time.",
	})
	readyGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_ready",
		Help: "1 when the SimpleWebApp's Ready condition is True, else 0.",
	}, []string{"namespace", "name"})
	stalledGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simplewebapp_stalled",
		Help: "1 when the SimpleWebApp is Stalled (cannot proceed without a change), else 0.",
	}, []string{"namespace", "name", "reason"})
)

func init() {
	metrics.Registry.MustRegister(renderDuration, renderCacheHits, applies, writes, objectsApplied, upgrades, rollbacks, readyGauge, stalledGauge)
}

// RegisterBuildInfo serves simplewebapp_build_info{version,revision,goversion} 1,
// so that a dashboard or an alert can tell which build each replica runs.
func RegisterBuildInfo(revision, goVersion string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "simplewebapp_build_info",
		Help:        "Always 1; the labels name the operator's version, source revision and Go version.",
		ConstLabels: prometheus.Labels{"version": OperatorVersion, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	metrics.Registry.MustRegister(g)
}

// recordMetrics updates the per-SimpleWebApp gauges and the event counters
// from one pass.
func recordMetrics(before, after *webappv1.SimpleWebApp, o outcome) {
	ns, name := after.Namespace, after.Name
	if o.objects != nil {
		objectsApplied.WithLabelValues(ns, name).Set(float64(len(o.objects)))
	}
	writes.Add(float64(o.writes))
	switch {
	case o.staleRead:
		applies.WithLabelValues("conflict").Inc()
	case o.failure != nil && !o.applied:
		applies.WithLabelValues("error").Inc()
	case o.writes > 0:
		applies.WithLabelValues("success").Inc()
	case o.applied:
		applies.WithLabelValues("unchanged").Inc()
	}
	readyGauge.WithLabelValues(ns, name).Set(boolFloat(isReady(after)))
	stalledGauge.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	for _, c := range after.Status.Conditions {
		if c.Type == webappv1.ConditionStalled && c.Status == metav1.ConditionTrue {
			stalledGauge.WithLabelValues(ns, name, c.Reason).Set(1)
		}
	}
	if o.rolledBack {
		rollbacks.Inc()
		upgrades.WithLabelValues("rolled_back").Inc()
	}
	started, succeeded := upgradeSteps(&before.Status, &after.Status)
	if started {
		upgrades.WithLabelValues("started").Inc()
	}
	if succeeded {
		upgrades.WithLabelValues("succeeded").Inc()
	}
}

// upgradeSteps reads an upgrade's start and success from the status before
// and after a pass, as stored: a pass that fails after its writes leaves its
// status unwritten, and the next pass may find the roll-out already done.
// An upgrade succeeds when the last healthy version moves from one version
// to another (a roll-back never moves it); it started when status.upgrade
// appears or names another target, or when it succeeded without a pass ever
// seeing it in flight.
func upgradeSteps(before, after *webappv1.SimpleWebAppStatus) (started, succeeded bool) {
	succeeded = before.LastHealthyVersion != "" && after.LastHealthyVersion != before.LastHealthyVersion
	switch {
	case after.Upgrade != nil:
		started = before.Upgrade == nil || before.Upgrade.To != after.Upgrade.To
	case succeeded:
		started = before.Upgrade == nil || before.Upgrade.To != after.LastHealthyVersion
	}
	return started, succeeded
}

// forgetMetrics drops the series of a deleted SimpleWebApp.
func forgetMetrics(ns, name string) {
	labels := prometheus.Labels{"namespace": ns, "name": name}
	objectsApplied.DeletePartialMatch(labels)
	readyGauge.DeletePartialMatch(labels)
	stalledGauge.DeletePartialMatch(labels)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
