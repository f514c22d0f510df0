package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/simplewebapp-operator/internal/metrics"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// recordMetrics updates the per-SimpleWebApp gauges and the event counters
// from one pass.
func recordMetrics(before, after *webappv1.SimpleWebApp, o outcome) {
	ns, name := after.Namespace, after.Name
	if o.objects != nil {
		metrics.ObjectsApplied.WithLabelValues(ns, name).Set(float64(len(o.objects)))
	}
	metrics.Writes.Add(float64(o.writes))
	switch {
	case o.staleRead:
		metrics.Applies.WithLabelValues("conflict").Inc()
	case o.failure != nil && !o.applied:
		metrics.Applies.WithLabelValues("error").Inc()
	case o.writes > 0:
		metrics.Applies.WithLabelValues("success").Inc()
	case o.applied:
		metrics.Applies.WithLabelValues("unchanged").Inc()
	}
	metrics.Ready.WithLabelValues(ns, name).Set(boolFloat(isReady(after)))
	metrics.Stalled.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	for _, c := range after.Status.Conditions {
		if c.Type == webappv1.ConditionStalled && c.Status == metav1.ConditionTrue {
			metrics.Stalled.WithLabelValues(ns, name, c.Reason).Set(1)
		}
	}
	if o.release.Version != "" { // a pass that resolved no version tells nothing about either
		metrics.RefusedLive.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
		if rp := o.refused; rp != nil {
			action := "removed"
			if rp.action == RefusedPatchesReport {
				action = "reported"
			}
			metrics.RefusedLive.WithLabelValues(ns, name, action).Set(1)
		}
		metrics.VersionWithdrawn.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
		if w := o.release.Withdrawn; w != nil {
			metrics.VersionWithdrawn.WithLabelValues(ns, name, w.Version).Set(1)
		}
	}
	if o.rolledBack {
		metrics.Rollbacks.Inc()
		metrics.Upgrades.WithLabelValues("rolled_back").Inc()
	}
	started, succeeded := upgradeSteps(&before.Status, &after.Status)
	if started {
		metrics.Upgrades.WithLabelValues("started").Inc()
	}
	if succeeded {
		metrics.Upgrades.WithLabelValues("succeeded").Inc()
	}
}

// upgradeSteps reads an upgrade's start and success from the status before
// and after a pass, as stored: a pass that fails after its Writes leaves its
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

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
