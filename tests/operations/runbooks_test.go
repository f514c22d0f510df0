package operations

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"example.com/simplewebapp-operator/internal/testkit"
)

// An overlay with the component config/prometheus/runbook-url and its
// ConfigMap sets the base of every alert's runbook_url, keeps each section,
// and does not output the ConfigMap.
func TestRunbookURLComponent(t *testing.T) {
	dir := t.TempDir()
	const base = "https://wiki.example.org/swa/troubleshooting.md"
	// kustomize takes bases and components by relative path only.
	rel := func(p string) string {
		r, err := filepath.Rel(dir, filepath.Join(env.Root, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	files := map[string]string{
		"kustomization.yaml": "resources:\n- " + rel("config/prometheus") +
			"\n- runbooks.yaml\ncomponents:\n- " + rel("config/prometheus/runbook-url") + "\n",
		"runbooks.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: simplewebapp-operator-runbooks\n" +
			"  annotations: {config.kubernetes.io/local-config: \"true\"}\ndata:\n  url: " + base + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	urls := func(objs objects) map[string]string {
		var rule struct{ Spec testkit.PrometheusRuleSpec }
		objs.one(t, "PrometheusRule", &rule)
		return rule.Spec.AlertAnnotation("runbook_url")
	}
	defaults := urls(kustomize(t, "config/prometheus"))
	overlay := kustomize(t, dir)
	set := urls(overlay)
	if len(defaults) < 5 || len(set) != len(defaults) {
		t.Fatalf("%d alerts in config/prometheus, %d in the overlay", len(defaults), len(set))
	}
	for alert, url := range defaults {
		_, section, ok := strings.Cut(url, "#")
		if want := base + "#" + section; !ok || set[alert] != want {
			t.Errorf("%s: runbook_url %q in the overlay, want %q", alert, set[alert], want)
		}
	}
	for _, o := range overlay {
		if meta, _ := o["metadata"].(map[string]any); o.kind() == "ConfigMap" && meta["name"] == "simplewebapp-operator-runbooks" {
			t.Error("the overlay outputs the runbooks ConfigMap")
		}
	}
}
