package operations

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The files of config/prometheus.
const (
	dashboardFile      = "config/prometheus/dashboard.json"
	prometheusRuleFile = "config/prometheus/prometheusrule.yaml"
	serviceMonitorFile = "config/prometheus/servicemonitor.yaml"
)

// targetLabels are added by Prometheus when it scrapes a ServiceMonitor
// target; expressions may use them although the operator does not serve them.
var targetLabels = map[string]bool{"job": true, "instance": true, "namespace": true, "pod": true, "service": true, "endpoint": true, "container": true}

// promqlRef is what an expression refers to: metric (sample) names, the label
// names it matches on per metric, and the label names it groups by. It is
// tests/promql's Ref, as its command writes it.
type promqlRef struct {
	Metrics  []string            `json:"metrics"`
	Matchers map[string][]string `json:"matchers"` // metric -> label names in its {...}
	Grouping []string            `json:"grouping"` // label names in by/without/on/ignoring/group_* lists
}

// promqlResult is what an expression refers to, or why it does not parse.
type promqlResult struct {
	Ref   *promqlRef `json:"ref"`
	Error string     `json:"error"`
}

// parsePromQL parses expressions (Grafana variables allowed) with
// Prometheus' own PromQL parser: the command of the tests/promql module, a
// module of its own so that this one does not depend on
// github.com/prometheus/prometheus. One run parses them all.
func parsePromQL(t *testing.T, exprs []string) []promqlResult {
	t.Helper()
	in, err := json.Marshal(exprs)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "go", "run", "./cmd/promqlrefs")
	cmd.Dir = filepath.Join(env.Root, "tests", "promql")
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run ./cmd/promqlrefs in tests/promql: %v\n%s", err, stderr.String())
	}
	var out []promqlResult
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out) != len(exprs) {
		t.Fatalf("promqlrefs: %d results for %d expressions (%v):\n%s", len(out), len(exprs), err, stdout.String())
	}
	t.Logf("%d expressions parsed with the PromQL parser in %s", len(exprs), time.Since(t0).Round(time.Millisecond))
	return out
}

// exprCheck is an expression to check against the scrape: where it is, and
// what else to check once it is parsed.
type exprCheck struct {
	where, expr string
	then        func(promqlRef)
}

// checkAgainstScrape parses the expressions and fails the test for every one
// that does not parse, every metric one names that the operator does not
// serve, and every label one matches or groups on that no such metric carries
// (target labels excepted).
func checkAgainstScrape(t *testing.T, checks []exprCheck, served map[string]map[string]bool) {
	t.Helper()
	exprs := make([]string, len(checks))
	for i, c := range checks {
		exprs[i] = c.expr
	}
	for i, res := range parsePromQL(t, exprs) {
		c := checks[i]
		if res.Error != "" || res.Ref == nil {
			t.Errorf("%s: %s", c.where, res.Error)
			continue
		}
		ref := *res.Ref
		labelsOf := map[string]bool{}
		for _, m := range ref.Metrics {
			labels, ok := served[m]
			if !ok {
				t.Errorf("%s: metric %s is not served by the operator (expr %s)", c.where, m, c.expr)
				continue
			}
			for l := range labels {
				labelsOf[l] = true
			}
			for _, l := range ref.Matchers[m] {
				if !labels[l] && !targetLabels[l] {
					t.Errorf("%s: %s has no label %q (expr %s)", c.where, m, l, c.expr)
				}
			}
		}
		for _, l := range ref.Grouping {
			if !labelsOf[l] && !targetLabels[l] {
				t.Errorf("%s: groups by %q, which none of %v carries (expr %s)", c.where, l, ref.Metrics, c.expr)
			}
		}
		if c.then != nil {
			c.then(ref)
		}
	}
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"` // a string, or {query: ...}
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // of a collapsed row
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

var reLabelValues = regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// checkDashboard parses config/prometheus/dashboard.json and checks every
// expression (panels and variables) against the metrics served, and that it
// covers what the dashboard is for.
func checkDashboard(t *testing.T, served map[string]map[string]bool) {
	b, err := os.ReadFile(filepath.Join(env.Root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: trailing data after the dashboard", dashboardFile)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: no title or uid", dashboardFile)
	}
	referenced := map[string]bool{}
	ids := map[int]string{}
	var checks []exprCheck
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("panel %d: no title or no queries", p.ID)
			}
			for _, tg := range p.Targets {
				where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
				checks = append(checks, exprCheck{where, tg.Expr, func(ref promqlRef) {
					for _, m := range ref.Metrics {
						referenced[m] = true
						// Other operators on the same Prometheus serve
						// controller-runtime's metrics too.
						if !slices.Contains(ref.Matchers[m], "job") {
							t.Errorf("%s: %s is not filtered by the $job variable (expr %s)", where, m, tg.Expr)
						}
					}
				}})
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		lv := reLabelValues.FindStringSubmatch(strings.TrimSpace(q))
		if lv == nil {
			t.Errorf("variable %s: query %q is not label_values(<selector>, <label>)", v.Name, q)
			continue
		}
		checks = append(checks, exprCheck{"variable " + v.Name, lv[1], func(ref promqlRef) {
			for _, m := range ref.Metrics {
				if !served[m][lv[2]] && !targetLabels[lv[2]] {
					t.Errorf("variable %s: %s has no label %q", v.Name, m, lv[2])
				}
			}
		}})
	}
	checkAgainstScrape(t, checks, served)
	// What the dashboard is for: reconciles and errors by controller,
	// reconcile latency, render duration, applies by result, objects per CR,
	// SimpleWebApps not Ready, upgrades and rollbacks, channel roll-outs.
	for _, m := range []string{
		"controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
		"controller_runtime_reconcile_time_seconds_bucket", "simplewebapp_render_duration_seconds_bucket",
		"simplewebapp_applies_total", "simplewebapp_objects_applied", "simplewebapp_ready",
		"simplewebapp_upgrades_total", "simplewebapp_rollbacks_total",
		"simplewebapp_version_halted", "simplewebapp_rollout_wave", "simplewebapp_rollout_apps",
	} {
		if !referenced[m] {
			t.Errorf("the dashboard shows nothing of %s", m)
		}
	}
	t.Logf("%s: %d panels, %d metrics referenced, all served: %v", dashboardFile, len(ids), len(referenced), sortedKeys(referenced))
}

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule the
// checks read.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Record      string            `json:"record"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// checkPrometheusRule parses config/prometheus/prometheusrule.yaml and checks
// every expression against the metrics served, and the alerts it must have.
func checkPrometheusRule(t *testing.T, served map[string]map[string]bool) {
	var pr prometheusRule
	raw, err := os.ReadFile(filepath.Join(env.Root, prometheusRuleFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &pr); err != nil {
		t.Fatalf("%s: %v", prometheusRuleFile, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Fatalf("%s: %s %s, want monitoring.coreos.com/v1 PrometheusRule", prometheusRuleFile, pr.APIVersion, pr.Kind)
	}
	type alert struct{ expr, forDuration string }
	alerts := map[string]alert{}
	var checks []exprCheck
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			checks = append(checks, exprCheck{where: "rule " + name, expr: r.Expr})
			if r.Alert == "" {
				continue
			}
			if _, dup := alerts[r.Alert]; dup {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			alerts[r.Alert] = alert{r.Expr, r.For}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" && s != "info" {
				t.Errorf("alert %s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: needs summary and description annotations", r.Alert)
			}
		}
	}
	checkAgainstScrape(t, checks, served)
	for name, want := range map[string]alert{
		"SimpleWebAppReconcileErrors": {`rate(controller_runtime_reconcile_errors_total{controller="simplewebapp"}[5m])) > 0`, "10m"},
		"SimpleWebAppRolledBack":      {`increase(simplewebapp_rollbacks_total[30m]) > 0`, ""},
		"SimpleWebAppNotReady":        {`simplewebapp_ready == 0`, "15m"},
		"SimpleWebAppStalled":         {`simplewebapp_stalled == 1`, "10m"},
		"SimpleWebAppVersionHalted":   {`max by (version, content) (simplewebapp_version_halted) > 0`, "1m"},
	} {
		got, ok := alerts[name]
		if !ok {
			t.Errorf("no alert %s", name)
			continue
		}
		if !strings.Contains(got.expr, want.expr) || got.forDuration != want.forDuration {
			t.Errorf("alert %s: expr %q for %q, want an expr with %q for %q", name, got.expr, got.forDuration, want.expr, want.forDuration)
		}
	}
	t.Logf("%s: %d alerts, every metric and label served: %v", prometheusRuleFile, len(alerts), sortedKeys(alerts))
}

// TestPrometheusConfig checks config/prometheus without an operator: it
// builds with kustomize; the ServiceMonitor selects the metrics Service that
// config/default installs, on its HTTPS port, with a bearer token from a
// Secret; and the binding for the scraper refers to config/default's
// metrics-reader ClusterRole. tests/install checks the token Secret and the
// TLS settings.
func TestPrometheusConfig(t *testing.T) {
	prom := kustomize(t, "config/prometheus")
	kinds := map[string]int{}
	for _, obj := range prom {
		kinds[obj.kind()]++
	}
	for _, k := range []string{"ServiceMonitor", "PrometheusRule", "ClusterRoleBinding", "ConfigMap", "ServiceAccount", "Secret"} {
		if kinds[k] != 1 {
			t.Errorf("kubectl kustomize config/prometheus: %d %s, want 1 (kinds: %v)", kinds[k], k, kinds)
		}
	}
	want, err := os.ReadFile(filepath.Join(env.Root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	prom.one(t, "ConfigMap", &cm)
	if cm.Data["dashboard.json"] != string(want) || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s does not hold %s with label grafana_dashboard=1", cm.Name, dashboardFile)
	}

	// What config/default installs: the metrics Service (the one with an
	// "https" port) and the metrics-reader ClusterRole.
	def := kustomize(t, "config/default")
	var svc *corev1.Service
	var readerRole string
	for _, obj := range def {
		switch obj.kind() {
		case "Service":
			var s corev1.Service
			obj.into(t, &s)
			if slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "https" }) {
				svc = &s
			}
		case "ClusterRole":
			var r rbacv1.ClusterRole
			obj.into(t, &r)
			for _, rule := range r.Rules {
				if slices.Contains(rule.NonResourceURLs, "/metrics") && slices.Contains(rule.Verbs, "get") {
					readerRole = r.Name
				}
			}
		}
	}
	if svc == nil || readerRole == "" {
		t.Fatalf("kubectl kustomize config/default: no Service with an https port (%v) or no ClusterRole granting get /metrics (%q)", svc != nil, readerRole)
	}

	var sm struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port          string `json:"port"`
				Scheme        string `json:"scheme"`
				Path          string `json:"path"`
				HonorLabels   bool   `json:"honorLabels"`
				Authorization struct {
					Type        string `json:"type"`
					Credentials struct {
						Name string `json:"name"`
						Key  string `json:"key"`
					} `json:"credentials"`
				} `json:"authorization"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	prom.one(t, "ServiceMonitor", &sm)
	if sm.Metadata.Namespace != svc.Namespace {
		t.Errorf("the ServiceMonitor is in namespace %q, the Service %s in %q", sm.Metadata.Namespace, svc.Name, svc.Namespace)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Error("the ServiceMonitor selects every Service")
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s; Service %s has labels %v", k, v, svc.Name, svc.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints: %+v", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
		t.Errorf("ServiceMonitor port %q is not a port of Service %s: %+v", ep.Port, svc.Name, svc.Spec.Ports)
	}
	if ep.Scheme != "https" || ep.Path != "/metrics" || ep.Authorization.Type != "Bearer" || ep.Authorization.Credentials.Name == "" || !ep.HonorLabels {
		t.Errorf("ServiceMonitor endpoint %+v: want https, /metrics, a bearer token and honorLabels (the namespace label of simplewebapp_*)", ep)
	}

	var crb rbacv1.ClusterRoleBinding
	prom.one(t, "ClusterRoleBinding", &crb)
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != readerRole {
		t.Errorf("ClusterRoleBinding %s refers to %s %s, want config/default's ClusterRole %s", crb.Name, crb.RoleRef.Kind, crb.RoleRef.Name, readerRole)
	}
	t.Logf("ServiceMonitor %s/%s selects Service %s port %s; %s binds %v to %s", sm.Metadata.Namespace, sm.Metadata.Name, svc.Name, ep.Port, crb.Name, crb.Subjects, readerRole)
}

// object is one object of a kustomize build.
type object map[string]any

func (o object) kind() string { k, _ := o["kind"].(string); return k }

func (o object) into(t *testing.T, v any) {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", o.kind(), err)
	}
}

type objects []object

// one decodes the only object of kind into v.
func (objs objects) one(t *testing.T, kind string, v any) {
	t.Helper()
	var found []object
	for _, o := range objs {
		if o.kind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	found[0].into(t, v)
}

// kustomize builds dir (relative to the repository, or absolute) with the
// cluster's kubectl.
func kustomize(t *testing.T, dir string) objects {
	t.Helper()
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(env.Root, dir)
	}
	out, err := env.Kubectl.Admin("kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	var objs objects
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var obj object
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
	return objs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
