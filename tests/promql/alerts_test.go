package promql

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	ruleFile  = "../../config/prometheus/prometheusrule.yaml"
	alertTest = "testdata/alerts_test.yaml"
)

// TestAlertRules checks the alerts of config/prometheus/prometheusrule.yaml
// with Prometheus' own tools: `promtool check rules` on the PrometheusRule's
// spec (the plain rule file Prometheus loads) and `promtool test rules` on
// testdata/alerts_test.yaml, which must hold for every alert a case where it
// fires and one where it does not. Each firing case, expected not to fire,
// must make promtool fail: the cases are checked, not merely run.
func TestAlertRules(t *testing.T) {
	promtool := buildPromtool(t)
	dir := t.TempDir()
	alerts, rules := writeRules(t, filepath.Join(dir, "rules.yaml"))

	out, err := exec.Command(promtool, "check", "rules", filepath.Join(dir, "rules.yaml")).CombinedOutput()
	if want := "SUCCESS: " + strconv.Itoa(rules) + " rules found"; err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("promtool check rules: %v, want %q:\n%s", err, want, out)
	}

	raw, err := os.ReadFile(alertTest)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runRuleTests(promtool, dir, raw); err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", alertTest, err, out)
	}

	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	tests, _ := doc["tests"].([]any)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests {
		tc, _ := tc.(map[string]any)
		cases, _ := tc["alert_rule_test"].([]any)
		for _, c := range cases {
			c, _ := c.(map[string]any)
			name, _ := c["alertname"].(string)
			if !alerts[name] {
				t.Errorf("%s: test %q expects alert %q, which %s does not define", alertTest, tc["name"], name, ruleFile)
			}
			exp, _ := c["exp_alerts"].([]any)
			if len(exp) == 0 {
				silent[name] = true
				continue
			}
			fires[name] = true
			// This test alone, with this case expecting no alert, must fail.
			c["exp_alerts"] = []any{}
			flipped := maps.Clone(doc)
			flipped["tests"] = []any{tc}
			b, err := yaml.Marshal(flipped)
			c["exp_alerts"] = exp
			if err != nil {
				t.Fatal(err)
			}
			if out, err := runRuleTests(promtool, dir, b); err == nil {
				t.Errorf("%s: test %q, %s at %v: promtool passed with no alert expected:\n%s", alertTest, tc["name"], name, c["eval_time"], out)
			}
		}
	}
	for name := range alerts {
		if !fires[name] || !silent[name] {
			t.Errorf("%s: alert %s needs a case where it fires (%v) and one where it does not (%v)", alertTest, name, fires[name], silent[name])
		}
	}
}

// buildPromtool builds promtool (pinned in hack/tools/promtool) into the
// tools cache, or finds it there, and returns its path.
func buildPromtool(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("bash", "../../hack/tools/build-tool.sh", "promtool")
	cmd.Stderr = os.Stderr // a cold build takes minutes: show its progress
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/tools/build-tool.sh promtool: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// writeRules writes the spec of the PrometheusRule, a plain Prometheus rule
// file, to path, and returns the names of its alerts and its number of rules.
func writeRules(t *testing.T, path string) (alerts map[string]bool, rules int) {
	t.Helper()
	raw, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string    `yaml:"kind"`
		Spec yaml.Node `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &pr); err != nil {
		t.Fatalf("%s: %v", ruleFile, err)
	}
	if pr.Kind != "PrometheusRule" {
		t.Fatalf("%s: kind %q, want PrometheusRule", ruleFile, pr.Kind)
	}
	var spec struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := pr.Spec.Decode(&spec); err != nil {
		t.Fatalf("%s: spec: %v", ruleFile, err)
	}
	alerts = map[string]bool{}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts[r.Alert] = true
			}
			rules++
		}
	}
	b, err := yaml.Marshal(&pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return alerts, rules
}

// runRuleTests runs `promtool test rules` on a test file with content
// test, written into dir beside rules.yaml.
func runRuleTests(promtool, dir string, test []byte) ([]byte, error) {
	path := filepath.Join(dir, "alerts_test.yaml")
	if err := os.WriteFile(path, test, 0o644); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	cmd := exec.Command(promtool, "test", "rules", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
