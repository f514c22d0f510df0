package operations

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestMetrics scrapes the operator's secure metrics endpoint as Prometheus
// would: HTTPS with a certificate it can verify (--metrics-cert-dir), a
// bearer token that the operator has the API server review (TokenReview) and
// authorize for `get /metrics` (SubjectAccessReview). It checks who may
// scrape, that the operator's metrics move with what it does, and that the
// dashboard and alerts in config/prometheus use only metrics it serves.
func TestMetrics(t *testing.T) {
	ns := testkit.Namespace(t, env.C, testkit.NS{Name: "ops-metrics"})
	// With leader election, as deployed: leader_election_master_status is
	// served, and the controller's metrics only by the leader.
	op := startOperator(t, "metrics", "--leader-elect=true", "--leader-election-namespace="+operatortest.Namespace)
	op.waitReady(t)

	// The metrics server starts with the manager; wait until it answers.
	testkit.WaitFor(t, time.Minute, "the metrics endpoint "+op.metricsAddr+" to answer", func(context.Context) (bool, string) {
		code, body, err := op.scrape(env.scraper.Token)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("%d %.200s", code, body)
	})
	for _, c := range []struct {
		who, token string
		want       []int
	}{
		{"no token", "", []int{http.StatusUnauthorized}},
		// The API server's TokenReview rejects it (internal/metricsauth:
		// 401; controller-runtime's filter answered 500).
		{"an invalid token", "not-a-token", []int{http.StatusUnauthorized}},
		{"ServiceAccount " + noRightsSA + " (no metrics-reader binding)", env.noRights.Token, []int{http.StatusForbidden}},
		{"ServiceAccount " + scraperSA + " (bound to metrics-reader)", env.scraper.Token, []int{http.StatusOK}},
	} {
		code, body, err := op.scrape(c.token)
		if err != nil {
			t.Fatalf("scrape with %s: %v", c.who, err)
		}
		if !slices.Contains(c.want, code) {
			t.Errorf("scrape with %s: %d, want %v: %.300s", c.who, code, c.want, body)
		} else {
			t.Logf("scrape with %s: %d %s", c.who, code, firstLineOf(body, code))
		}
	}

	ss, err := op.metrics()
	if err != nil {
		t.Fatal(err)
	}
	success0, _ := ss.get("simplewebapp_applies_total", map[string]string{"result": "success"})
	started0, _ := ss.get("simplewebapp_upgrades_total", map[string]string{"result": "started"})
	succeeded0, _ := ss.get("simplewebapp_upgrades_total", map[string]string{"result": "succeeded"})

	// A SimpleWebApp is applied: applies succeed, it becomes Ready (gauge 1),
	// its objects are counted. It is pinned to the oldest package version, to
	// be upgraded to the newest.
	versions := testkit.Versions(t)
	if len(versions) < 2 {
		t.Fatalf("package versions %v: an upgrade needs two", versions)
	}
	from, to := versions[0], versions[len(versions)-1]
	app := newApp(ns, "metrics-app", 2, from)
	if err := env.C.Create(t.Context(), app); err != nil {
		t.Fatal(err)
	}
	waitAppReady(t, ns, app.Name, 1, from)
	key := map[string]string{"namespace": ns, "name": app.Name}
	waitMetrics(t, op, "the first apply of "+app.Name, func(ss samples) (bool, string) {
		success, _ := ss.get("simplewebapp_applies_total", map[string]string{"result": "success"})
		ready, hasReady := ss.get("simplewebapp_ready", key)
		objects, _ := ss.get("simplewebapp_objects_applied", key)
		want := inventorySize(t, ns, app.Name)
		return success > success0 && hasReady && ready == 1 && objects == float64(want),
			fmt.Sprintf("applies_total{success} %v (was %v), ready %v (present %t), objects_applied %v (inventory %d)", success, success0, ready, hasReady, objects, want)
	})

	// An upgrade to the newest version.
	gen := updateApp(t, ns, app.Name, func(swa *webappv1.SimpleWebApp) { swa.Spec.Version = to })
	waitAppReady(t, ns, app.Name, gen, to)
	waitMetrics(t, op, "the upgrade of "+app.Name+" to "+to, func(ss samples) (bool, string) {
		started, _ := ss.get("simplewebapp_upgrades_total", map[string]string{"result": "started"})
		succeeded, _ := ss.get("simplewebapp_upgrades_total", map[string]string{"result": "succeeded"})
		ready, _ := ss.get("simplewebapp_ready", key)
		objects, _ := ss.get("simplewebapp_objects_applied", key)
		want := inventorySize(t, ns, app.Name)
		return started > started0 && succeeded > succeeded0 && ready == 1 && objects == float64(want),
			fmt.Sprintf("upgrades started %v (was %v) succeeded %v (was %v), ready %v, objects %v (inventory %d)", started, started0, succeeded, succeeded0, ready, objects, want)
	})

	// A SimpleWebApp that cannot be applied: Stalled and not Ready.
	stalled := newApp(ns, "metrics-stalled", 1, "9.9.9")
	if err := env.C.Create(t.Context(), stalled); err != nil {
		t.Fatal(err)
	}
	stalledKey := map[string]string{"namespace": ns, "name": stalled.Name}
	waitMetrics(t, op, stalled.Name+" to be reported stalled", func(ss samples) (bool, string) {
		st, hasSt := ss.get("simplewebapp_stalled", stalledKey)
		ready, hasReady := ss.get("simplewebapp_ready", stalledKey)
		return hasSt && st == 1 && hasReady && ready == 0, fmt.Sprintf("stalled %v (present %t), ready %v (present %t)", st, hasSt, ready, hasReady)
	})

	ss, err = op.metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"simplewebapp_applies_total", "simplewebapp_render_duration_seconds_bucket", "simplewebapp_render_duration_seconds_count",
		"simplewebapp_objects_applied", "simplewebapp_ready", "simplewebapp_stalled", "simplewebapp_upgrades_total",
		"simplewebapp_rollbacks_total", "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
		"controller_runtime_reconcile_time_seconds_bucket", "leader_election_master_status", "workqueue_depth",
	} {
		if _, ok := ss.get(name, nil); !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if v, _ := ss.get("controller_runtime_reconcile_total", map[string]string{"controller": "simplewebapp", "result": "success"}); v == 0 {
		t.Error(`controller_runtime_reconcile_total{controller="simplewebapp",result="success"} is 0`)
	}
	if v, _ := ss.get("simplewebapp_render_duration_seconds_count", nil); v == 0 {
		t.Error("simplewebapp_render_duration_seconds_count is 0")
	}
	for _, s := range ss {
		if strings.HasPrefix(s.name, "simplewebapp_") && s.labels["namespace"] == ns {
			t.Logf("  %s%v %v", s.name, s.labels, s.value)
		}
	}

	// Dashboards and alerts cannot drift from the metrics: everything they
	// use is in this scrape (which has every simplewebapp_* family, as the
	// steps above made each of them appear), or is a roll-out family.
	served := ss.names()
	for name, labels := range rolloutFamilies(t) {
		if _, ok := served[name]; !ok {
			served[name] = labels
		}
	}
	t.Run("dashboard", func(t *testing.T) { checkDashboard(t, served) })
	t.Run("prometheusrule", func(t *testing.T) { checkPrometheusRule(t, served) })

	// A deleted SimpleWebApp's series go away.
	if err := env.C.Delete(t.Context(), stalled); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, op, "the series of the deleted "+stalled.Name+" to go", func(ss samples) (bool, string) {
		_, hasSt := ss.get("simplewebapp_stalled", stalledKey)
		_, hasReady := ss.get("simplewebapp_ready", stalledKey)
		return !hasSt && !hasReady, fmt.Sprintf("stalled present %t, ready present %t", hasSt, hasReady)
	})
}

// rolloutFamilies are the metric families that have series only while a
// channel's version rolls out or is halted, which no step above brings about
// (tests/fleet does, and scrapes the leaders then), with their label names:
// what fleet.Report, the code that sets them in the operator, makes appear
// when run here in the test process.
func rolloutFamilies(t *testing.T) map[string]map[string]bool {
	t.Helper()
	families := func() map[string]map[string]bool {
		mfs, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]bool{}
		for _, mf := range mfs {
			labels := map[string]bool{}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = true
				}
			}
			out[mf.GetName()] = labels
		}
		return out
	}
	before := families()
	k := fleet.Key{Version: "1.0.0", Hash: "0123456789ab"}
	fleet.Report([]fleet.State{{Key: k, Halted: &fleet.Halt{Reason: "test"}}}, map[fleet.Key][]fleet.App{k: {{Wants: true}}})
	after := families()
	fleet.Report(nil, nil)
	out := map[string]map[string]bool{}
	for name, labels := range after {
		if _, ok := before[name]; !ok {
			out[name] = labels
		}
	}
	if len(out) == 0 {
		t.Fatal("fleet.Report set no metric family")
	}
	t.Logf("roll-out families, from fleet.Report: %v", out)
	return out
}

// waitMetrics scrapes until cond holds.
func waitMetrics(t *testing.T, op *operator, what string, cond func(samples) (bool, string)) {
	t.Helper()
	testkit.WaitFor(t, 2*time.Minute, "metrics: "+what, func(context.Context) (bool, string) {
		ss, err := op.metrics()
		if err != nil {
			return false, err.Error()
		}
		return cond(ss)
	})
}

// inventorySize is the number of objects in the SimpleWebApp's status.
func inventorySize(t *testing.T, ns, name string) int {
	swa := &webappv1.SimpleWebApp{}
	if err := env.C.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
		return -1
	}
	return len(swa.Status.Inventory)
}

// firstLineOf is what a log shows of a response body: the error text, or for
// a 200 only that it is metrics.
func firstLineOf(body string, code int) string {
	if code == http.StatusOK {
		return fmt.Sprintf("(%d bytes of metrics)", len(body))
	}
	line, _, _ := strings.Cut(strings.TrimSpace(body), "\n")
	return fmt.Sprintf("%q", line)
}
