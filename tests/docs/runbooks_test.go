package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// slug is the anchor GitHub and most Markdown renderers give a heading.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// Every alert has a runbook_url into docs/troubleshooting.md whose section
// exists; an anchor made from the reason label resolves for every reason.
func TestEveryAlertHasARunbook(t *testing.T) {
	raw, err := os.ReadFile("../../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			anchors[slug(strings.TrimLeft(h, "#"))] = true
		}
	}
	var rule struct{ Spec testkit.PrometheusRuleSpec }
	b, err := os.ReadFile("../../config/prometheus/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		t.Fatal(err)
	}
	urls := rule.Spec.AlertAnnotation("runbook_url")
	for alert, url := range urls {
		base, anchor, ok := strings.Cut(url, "#")
		if !ok || !strings.HasSuffix(base, "/troubleshooting.md") {
			t.Errorf("%s: runbook_url %q, want .../troubleshooting.md#section", alert, url)
			continue
		}
		if anchor == "{{ $labels.reason | toLower }}" {
			for _, reason := range webappv1.AllReasons() {
				if !anchors[strings.ToLower(reason)] {
					t.Errorf("%s: no section for reason %s", alert, reason)
				}
			}
			continue
		}
		if !anchors[anchor] {
			t.Errorf("%s: runbook_url %q: docs/troubleshooting.md has no section #%s", alert, url, anchor)
		}
	}
	if len(urls) < 5 {
		t.Fatalf("read %d alerts", len(urls))
	}
}
