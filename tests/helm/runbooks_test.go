package helm_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// runbookURLs are the runbook_url annotations of the rendered PrometheusRule.
func runbookURLs(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	rule := mustFind(t, objs, "PrometheusRule", "operators", "swa-operator")
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	out := map[string]string{}
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			alert, _, _ := unstructured.NestedString(r.(map[string]any), "alert")
			out[alert], _, _ = unstructured.NestedString(r.(map[string]any), "annotations", "runbook_url")
		}
	}
	return out
}

// metrics.prometheusRule.runbookBaseURL replaces the base of every alert's
// runbook_url and keeps its section.
func TestRunbookBaseURL(t *testing.T) {
	defaults := runbookURLs(t, template(t, "--set", "metrics.prometheusRule.enabled=true"))
	const base = "https://wiki.example.org/swa/troubleshooting.md"
	set := runbookURLs(t, template(t, "--set", "metrics.prometheusRule.enabled=true,metrics.prometheusRule.runbookBaseURL="+base))
	if len(defaults) < 5 || len(set) != len(defaults) {
		t.Fatalf("%d alerts by default, %d with the base set", len(defaults), len(set))
	}
	for alert, url := range defaults {
		_, section, ok := strings.Cut(url, "#")
		if !ok || section == "" {
			t.Errorf("%s: runbook_url %q has no section", alert, url)
		}
		if want := base + "#" + section; set[alert] != want {
			t.Errorf("%s: runbook_url %q with the base set, want %q", alert, set[alert], want)
		}
	}
}
