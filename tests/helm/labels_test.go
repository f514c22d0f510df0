package helm_test

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

// chartMeta is the chart's Chart.yaml.
type chartMeta struct {
	Name, Version, AppVersion string
}

func readChartMeta(t *testing.T) chartMeta {
	t.Helper()
	var c chartMeta
	if err := sigsyaml.Unmarshal(readFile(t, chartDir+"/Chart.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	if c.Name == "" || c.Version == "" || c.AppVersion == "" {
		t.Fatalf("Chart.yaml: %+v, want name, version and appVersion", c)
	}
	return c
}

// operatorSelector is what selects the operator's pods, as before the
// standard labels: a Deployment's selector is immutable, so an upgrade
// from an older chart needs it unchanged.
var operatorSelector = map[string]string{
	"app.kubernetes.io/name":     "simplewebapp-operator",
	"app.kubernetes.io/instance": "swa",
	"control-plane":              "controller-manager",
}

// TestStandardLabels: every object the chart renders (with the defaults,
// and with every optional part on) has the recommended labels, version
// being Chart.yaml's appVersion, and so do the operator's pods; the
// selectors have neither version nor chart.
func TestStandardLabels(t *testing.T) {
	meta := readChartMeta(t)
	want := map[string]string{
		"app.kubernetes.io/instance":   "swa",
		"app.kubernetes.io/version":    meta.AppVersion,
		"app.kubernetes.io/managed-by": "Helm",
		"helm.sh/chart":                meta.Name + "-" + meta.Version,
	}
	check := func(t *testing.T, what string, got map[string]string, name string) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: label %s=%q, want %q (labels %v)", what, k, got[k], v, got)
			}
		}
		if got["app.kubernetes.io/name"] != name {
			t.Errorf("%s: label app.kubernetes.io/name=%q, want %q", what, got["app.kubernetes.io/name"], name)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"everything on", []string{"--set", "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.prometheusServiceAccount=monitoring/prometheus-k8s,metrics.tls.certManager.enabled=true",
			"--set", "metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true,metrics.dashboard.namespace=grafana",
			"--set", "watchNamespaces={team-a,team-b},channels.configMap.name=c,serviceAccount.annotations.a=b"}},
		{"plain metrics, existing ServiceAccount", []string{"--set", "metrics.secure=false,serviceAccount.create=false,serviceAccount.name=x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := template(t, tc.args...)
			for _, o := range objs {
				name := "simplewebapp-operator"
				if o.GetAnnotations()["helm.sh/hook"] == "test" && o.GetKind() == "Pod" {
					name = "simplewebapp-operator-test" // not selected as an operator pod
				}
				check(t, key(o), o.GetLabels(), name)
			}
			dep := as[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "operators", "swa-controller-manager"))
			check(t, "the operator's pod template", dep.Spec.Template.Labels, "simplewebapp-operator")
			if !maps.Equal(dep.Spec.Selector.MatchLabels, operatorSelector) || len(dep.Spec.Selector.MatchExpressions) > 0 {
				t.Errorf("Deployment selector %v, want %v", dep.Spec.Selector, operatorSelector)
			}
			if svc := find(objs, "Service", "operators", "swa-controller-manager-metrics-service"); svc != nil {
				if got := as[corev1.Service](t, svc).Spec.Selector; !maps.Equal(got, operatorSelector) {
					t.Errorf("metrics Service selector %v, want %v", got, operatorSelector)
				}
			}
			if sm := find(objs, "ServiceMonitor", "operators", "swa-controller-manager"); sm != nil {
				if got, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels"); !maps.Equal(got, operatorSelector) {
					t.Errorf("ServiceMonitor selector %v, want %v", got, operatorSelector)
				}
			}
		})
	}
}

// TestServiceAccount: by default the chart creates the operator's
// ServiceAccount (serviceAccount.name renames it); with
// serviceAccount.create=false it creates none and the Deployment and every
// binding of the operator's roles name serviceAccount.name, which is then
// required.
func TestServiceAccount(t *testing.T) {
	// operatorSA returns the ServiceAccounts the release creates (the test
	// hook's own, made only by `helm test`, aside), the Deployment's
	// serviceAccountName and, by binding, the ServiceAccounts it names.
	operatorSA := func(objs []*unstructured.Unstructured) ([]string, string, map[string][]rbacv1.Subject) {
		var sas []string
		bound := map[string][]rbacv1.Subject{}
		for _, o := range objs {
			if o.GetAnnotations()["helm.sh/hook"] != "" {
				continue
			}
			switch o.GetKind() {
			case "ServiceAccount":
				sas = append(sas, key(o))
			case "RoleBinding":
				bound[key(o)] = as[rbacv1.RoleBinding](t, o).Subjects
			case "ClusterRoleBinding":
				bound[key(o)] = as[rbacv1.ClusterRoleBinding](t, o).Subjects
			}
		}
		dep := as[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "operators", "swa-controller-manager"))
		return sas, dep.Spec.Template.Spec.ServiceAccountName, bound
	}
	for _, tc := range []struct {
		name     string
		set      string
		sas      []string // created by the release
		sa       string   // used
		bindings []string
	}{
		{"defaults", "", []string{"ServiceAccount/operators/swa-controller-manager"}, "swa-controller-manager",
			[]string{"ClusterRoleBinding//swa-manager-rolebinding", "RoleBinding/operators/swa-leader-election-rolebinding"}},
		{"created, named", "serviceAccount.name=swa-operator", []string{"ServiceAccount/operators/swa-operator"}, "swa-operator",
			[]string{"ClusterRoleBinding//swa-manager-rolebinding", "RoleBinding/operators/swa-leader-election-rolebinding"}},
		{"existing", "serviceAccount.create=false,serviceAccount.name=platform-operator", nil, "platform-operator",
			[]string{"ClusterRoleBinding//swa-manager-rolebinding", "RoleBinding/operators/swa-leader-election-rolebinding"}},
		{"existing, namespace mode", "serviceAccount.create=false,serviceAccount.name=platform-operator,watchNamespaces={team-a,team-b}", nil, "platform-operator",
			[]string{"ClusterRoleBinding//swa-manager-cluster-rolebinding", "RoleBinding/operators/swa-leader-election-rolebinding",
				"RoleBinding/team-a/swa-manager-rolebinding", "RoleBinding/team-b/swa-manager-rolebinding"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.set != "" {
				args = []string{"--set", tc.set}
			}
			sas, used, bound := operatorSA(template(t, args...))
			if !slices.Equal(sas, tc.sas) {
				t.Errorf("ServiceAccounts %v, want %v", sas, tc.sas)
			}
			if used != tc.sa {
				t.Errorf("Deployment serviceAccountName %q, want %q", used, tc.sa)
			}
			if got := slices.Sorted(maps.Keys(bound)); !slices.Equal(got, tc.bindings) {
				t.Errorf("bindings %v, want %v", got, tc.bindings)
			}
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: tc.sa, Namespace: "operators"}}
			for b, subjects := range bound {
				if !reflect.DeepEqual(subjects, want) {
					t.Errorf("%s subjects %+v, want %+v", b, subjects, want)
				}
			}
		})
	}
	_, _, err := runHelm(t, "", "template", "swa", chartDir, "--set", "serviceAccount.create=false")
	if err == nil || !strings.Contains(err.Error(), "serviceAccount.name is required when serviceAccount.create is false") {
		t.Errorf("serviceAccount.create=false without a name: %v, want the chart's message", err)
	}
}

// TestSchemaAllowsGlobal: Helm hands a subchart its parent's `global`
// values, so the schema accepts any object there while still refusing
// unknown keys beside it.
func TestSchemaAllowsGlobal(t *testing.T) {
	values := func(yaml string) string {
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	global := "global:\n  foo: bar\n  imageRegistry: registry.example\n  nested: {list: [1, two], flag: true}\n"
	if got, want := keys(template(t, "-f", values(global))), keys(template(t)); !slices.Equal(got, want) {
		t.Errorf("with global values the chart renders\n  %s\nwant what it renders without\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	template(t, "--set", "global.foo=bar")
	_, _, err := runHelm(t, "", "template", "swa", chartDir, "-f", values(global+"replicas: 3\n"))
	if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("an unknown top-level key beside global: %v, want the schema's rejection naming replicas", err)
	}
}
