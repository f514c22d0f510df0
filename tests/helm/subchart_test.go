package helm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
)

// umbrellaValues are the values of the umbrella chart: a dependency
// condition outside the operator's values (its schema refuses an `enabled`
// key), `global` values as a platform chart shares them, and one operator
// value passed down.
const umbrellaValues = `operator:
  enabled: true
global:
  foo: bar
  imageRegistry: registry.example
  labels: {team: platform}
simplewebapp-operator:
  replicaCount: 1
`

// umbrella writes a minimal umbrella chart into a temporary directory with
// this chart as a file:// dependency, packaged into its charts/ by
// `helm dependency build` (as `helm package` would ship it), and returns
// the directory. values is the umbrella's values.yaml.
func umbrella(t *testing.T, values string) string {
	t.Helper()
	meta := readChartMeta(t)
	dir := filepath.Join(t.TempDir(), "platform")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	chart := fmt.Sprintf(`apiVersion: v2
name: platform
description: An umbrella chart with the operator as a subchart.
type: application
version: 1.0.0
dependencies:
- name: %s
  version: %q
  repository: %q
  condition: operator.enabled
`, meta.Name, meta.Version, "file://"+filepath.Join(repoRoot, chartDir))
	for name, content := range map[string]string{"Chart.yaml": chart, "values.yaml": values} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := runHelm(t, "", "dependency", "build", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "charts", meta.Name+"-"+meta.Version+".tgz")); err != nil {
		t.Fatalf("helm dependency build: %v", err)
	}
	return dir
}

// TestSubchart: as the dependency of an umbrella chart with `global`
// values, the chart renders the objects it renders alone, with the values
// the umbrella gives it, and lints; its schema still refuses unknown keys
// under its own name.
func TestSubchart(t *testing.T) {
	dir := umbrella(t, umbrellaValues)
	out, _, err := runHelm(t, "", "template", "swa", dir, "--namespace", "operators", "--set", "global.extra=from-the-command-line")
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, []byte(out))
	if got, want := keys(objs), keys(template(t)); !slices.Equal(got, want) {
		t.Errorf("as a subchart the chart renders\n  %s\nwant what it renders alone\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	dep := as[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "operators", "swa-controller-manager"))
	if got := ptr.Deref(dep.Spec.Replicas, -1); got != 1 {
		t.Errorf("replicas %d, want the umbrella's simplewebapp-operator.replicaCount 1", got)
	}
	if v := readChartMeta(t).AppVersion; dep.Labels["app.kubernetes.io/version"] != v {
		t.Errorf("Deployment labels %v: want app.kubernetes.io/version=%s", dep.Labels, v)
	}
	if out, _, err := runHelm(t, "", "lint", "--strict", "--with-subcharts", dir); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	_, _, err = runHelm(t, "", "template", "swa", dir, "--set", "simplewebapp-operator.replicas=3")
	if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("an unknown key of the subchart: %v, want the schema's rejection naming replicas", err)
	}
}
