package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
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
	applies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "simplewebapp_applies_total",
		Help: "Server-side applies of a SimpleWebApp's objects, by result (success, error, conflict).",
	}, []string{"result"})
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
	metrics.Registry.MustRegister(renderDuration, applies, objectsApplied, upgrades, rollbacks, readyGauge, stalledGauge)
}

// recordMetrics updates the per-SimpleWebApp gauges and the event counters
// from one pass.
func recordMetrics(before, after *webappv1.SimpleWebApp, o outcome) {
	ns, name := after.Namespace, after.Name
	if o.objects != nil {
		objectsApplied.WithLabelValues(ns, name).Set(float64(len(o.objects)))
	}
	readyGauge.WithLabelValues(ns, name).Set(boolFloat(isTrue(after, "Ready")))
	stalledGauge.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	for _, c := range after.Status.Conditions {
		if c.Type == "Stalled" && c.Status == "True" {
			stalledGauge.WithLabelValues(ns, name, c.Reason).Set(1)
		}
	}
	if o.rolledBack {
		rollbacks.Inc()
		upgrades.WithLabelValues("rolled_back").Inc()
	}
	if after.Status.Upgrade != nil && before.Status.Upgrade == nil {
		upgrades.WithLabelValues("started").Inc()
	}
	if before.Status.Upgrade != nil && after.Status.Upgrade == nil && !o.rolledBack && o.failure == nil {
		upgrades.WithLabelValues("succeeded").Inc()
	}
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
