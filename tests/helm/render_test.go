package helm_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestSchemaRejectsBadValues: a wrong type, an unknown key or a malformed
// value fails `helm template` (and so install and upgrade) with the schema's
// message naming the value, before anything is rendered.
func TestSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // part of the message: the value's path
	}{
		{"replicas not a number", []string{"--set", "replicaCount=two"}, "replicaCount"},
		{"negative replicas", []string{"--set", "replicaCount=-1"}, "replicaCount"},
		{"unknown top-level key", []string{"--set", "replicas=3"}, "replicas"},
		{"typo in a nested key", []string{"--set", "image.tags=v1"}, "tags"},
		{"unknown pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, "pullPolicy"},
		{"digest without sha256", []string{"--set", "image.digest=abc123"}, "digest"},
		{"port out of range", []string{"--set", "metrics.port=70000"}, "port"},
		{"boolean as a string", []string{"--set-string", "leaderElection.enabled=true"}, "enabled"},
		{"toggle not an object", []string{"--set", "tenantRoles=true"}, "tenantRoles"},
		{"watchNamespaces not a list", []string{"--set", "watchNamespaces=team-a"}, "watchNamespaces"},
		{"invalid namespace name", []string{"--set", "watchNamespaces={Team_A}"}, "watchNamespaces"},
		{"unknown key under channels.configMap", []string{"--set", "channels.configMap.nam=x"}, "nam"},
		{"relative channels mountPath", []string{"--set", "channels.mountPath=channels"}, "mountPath"},
		{"extraArgs without --", []string{"--set", "extraArgs[0]=zap-log-level=debug"}, "extraArgs"},
		{"memory limit not a quantity", []string{"--set", "resources.limits.memory=lots"}, "memory"},
		{"GOMEMLIMIT in Kubernetes units", []string{"--set", "gomemlimit=300Mi"}, "gomemlimit"},
		{"scrape interval not a duration", []string{"--set", "metrics.serviceMonitor.interval=soon"}, "interval"},
		{"prometheus ServiceAccount without namespace", []string{"--set", "metrics.serviceMonitor.prometheusServiceAccount=prometheus"}, "prometheusServiceAccount"},
		{"fullnameOverride too long", []string{"--set", "fullnameOverride=" + strings.Repeat("x", 41)}, "fullnameOverride"},
		{"test timeout not a duration", []string{"--set", "test.timeout=2 minutes"}, "timeout"},
		{"serviceAccount.create as a string", []string{"--set-string", "serviceAccount.create=false"}, "create"},
		{"invalid ServiceAccount name", []string{"--set", "serviceAccount.name=Operator_SA"}, "serviceAccount"},
		{"global not an object", []string{"--set", "global=3"}, "global"},
		{"invalid metrics certificate Secret name", []string{"--set", "metrics.tls.secretName=Metrics_Cert"}, "secretName"},
		{"cert-manager toggle not an object", []string{"--set", "metrics.tls.certManager=true"}, "certManager"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runHelm(t, "", append([]string{"template", "swa", chartDir}, tc.args...)...)
			if err == nil {
				t.Fatalf("%v accepted; rendered %d bytes", tc.args, len(out))
			}
			if msg := err.Error(); !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("error does not name %q as a schema violation:\n%v", tc.want, err)
			}
		})
	}
	// And values that are fine pass.
	template(t, "--set", "replicaCount=0,image.digest=sha256:"+strings.Repeat("0", 64)+",watchNamespaces={a,b-2}",
		"--set", "resources.limits.memory=1Gi,resources.requests.cpu=0.5,metrics.serviceMonitor.interval=1m30s,extraArgs[0]=--zap-log-level=debug")
}

// TestDefaults: the default values render the objects of config/default
// (no Namespace: Helm's release namespace) plus the tenant roles and the
// test hook, and nothing of the optional parts.
func TestDefaults(t *testing.T) {
	objs := template(t)
	want := []string{
		"ClusterRole//swa-admin",
		"ClusterRole//swa-editor",
		"ClusterRole//swa-manager-role",
		"ClusterRole//swa-metrics-reader",
		"ClusterRole//swa-viewer",
		"ClusterRoleBinding//swa-manager-rolebinding",
		"Deployment/operators/swa-controller-manager",
		"Pod/operators/swa-test",
		"Role/operators/swa-leader-election-role",
		"Role/operators/swa-test",
		"RoleBinding/operators/swa-leader-election-rolebinding",
		"RoleBinding/operators/swa-test",
		"Service/operators/swa-controller-manager-metrics-service",
		"ServiceAccount/operators/swa-controller-manager",
		"ServiceAccount/operators/swa-test",
	}
	if got := keys(objs); !slices.Equal(got, want) {
		t.Fatalf("renders\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	c := as[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "operators", "swa-controller-manager")).Spec.Template.Spec.Containers[0]
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--watch-namespaces") || strings.HasPrefix(a, "--channels-dir") {
			t.Errorf("default args %q have %s", c.Args, a)
		}
	}
	if len(c.VolumeMounts) > 0 {
		t.Errorf("default volume mounts %+v", c.VolumeMounts)
	}
	// Only the package's image repository, as config/manager allows; an
	// empty list allows any image, a digest can be required.
	if !slices.Contains(c.Args, "--allowed-images=docker.io/nginxinc/nginx-unprivileged") || slices.Contains(c.Args, "--require-image-digest") {
		t.Errorf("default args %q: want the package's image repository allowed, no digest required", c.Args)
	}
	wide := as[appsv1.Deployment](t, mustFind(t, template(t, "--set", "allowedImages=null,requireImageDigest=true"), "Deployment", "operators", "swa-controller-manager")).Spec.Template.Spec.Containers[0]
	if !slices.Contains(wide.Args, "--require-image-digest") || slices.ContainsFunc(wide.Args, func(a string) bool { return strings.HasPrefix(a, "--allowed-images") }) {
		t.Errorf("args %q with allowedImages=null, requireImageDigest=true", wide.Args)
	}
	// The Go runtime's settings and the resources (GOMEMLIMIT is set below
	// the memory limit) are those of config/manager/manager.yaml.
	var manager *corev1.Container
	for _, doc := range strings.Split(string(readFile(t, "config/manager/manager.yaml")), "\n---") {
		var d appsv1.Deployment
		if err := sigsyaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" {
			manager = &d.Spec.Template.Spec.Containers[0]
		}
	}
	if manager == nil {
		t.Fatal("config/manager/manager.yaml has no Deployment")
	}
	if len(manager.Env) == 0 || !reflect.DeepEqual(c.Env, manager.Env) {
		t.Errorf("default env %+v, want config/manager/manager.yaml's %+v", c.Env, manager.Env)
	}
	if !equality.Semantic.DeepEqual(c.Resources, manager.Resources) {
		t.Errorf("default resources %+v, want config/manager/manager.yaml's %+v", c.Resources, manager.Resources)
	}
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		n, unit := e.Value, int64(1)
		for suffix, u := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
			if v, ok := strings.CutSuffix(e.Value, suffix); ok {
				n, unit = v, u
			}
		}
		soft, err := strconv.ParseInt(n, 10, 64)
		if limit := c.Resources.Limits.Memory().Value(); err != nil || soft*unit >= limit {
			t.Errorf("GOMEMLIMIT=%s (%v), want a number of bytes below the memory limit of %d", e.Value, err, limit)
		}
	}
}

// TestTenantRoles: the chart's tenant roles are those of
// config/rbac/tenant_roles.yaml, with the aggregation labels; off, none.
func TestTenantRoles(t *testing.T) {
	objs := template(t)
	var source []*rbacv1.ClusterRole
	for _, o := range parse(t, readFile(t, "config/rbac/tenant_roles.yaml")) {
		source = append(source, as[rbacv1.ClusterRole](t, o))
	}
	if len(source) != 3 {
		t.Fatalf("config/rbac/tenant_roles.yaml: %d ClusterRoles, want 3", len(source))
	}
	aggregate := map[string]string{"admin": "admin", "editor": "edit", "viewer": "view"}
	for _, s := range source {
		c := as[rbacv1.ClusterRole](t, mustFind(t, objs, "ClusterRole", "", "swa-"+s.Name))
		if !reflect.DeepEqual(c.Rules, s.Rules) {
			t.Errorf("ClusterRole swa-%s rules differ from config/rbac/tenant_roles.yaml:\n%+v\nwant\n%+v", s.Name, c.Rules, s.Rules)
		}
		label := "rbac.authorization.k8s.io/aggregate-to-" + aggregate[s.Name]
		if c.Labels[label] != "true" || s.Labels[label] != "true" {
			t.Errorf("%s: label %s=%q in the chart, %q in config/rbac; want true", s.Name, label, c.Labels[label], s.Labels[label])
		}
	}
	for _, o := range template(t, "--set", "tenantRoles.enabled=false") {
		if o.GetKind() == "ClusterRole" && slices.Contains([]string{"swa-admin", "swa-editor", "swa-viewer"}, o.GetName()) {
			t.Errorf("tenantRoles.enabled=false renders %s", key(o))
		}
	}
}

// TestMonitoringToggles: each toggle adds its object and only it; the rule
// and dashboard are config/prometheus's, their own templates untouched; the
// ServiceMonitor selects the metrics Service and scrapes its port.
func TestMonitoringToggles(t *testing.T) {
	base := keys(template(t))
	// A secure ServiceMonitor comes with the identity it scrapes with.
	scraper := []string{"ClusterRoleBinding//swa-metrics-reader-scraper", "Secret/operators/swa-metrics-scraper-token",
		"ServiceAccount/operators/swa-metrics-scraper", "ServiceMonitor/operators/swa-controller-manager"}
	certManager := []string{"Certificate/operators/swa-metrics-ca", "Certificate/operators/swa-metrics-server-cert",
		"Issuer/operators/swa-metrics-ca-issuer", "Issuer/operators/swa-selfsigned-issuer"}
	for _, tc := range []struct {
		set  string
		adds []string
	}{
		{"metrics.serviceMonitor.enabled=true,metrics.tls.secretName=mine", scraper},
		{"metrics.serviceMonitor.enabled=true,metrics.tls.secretName=mine,metrics.serviceMonitor.prometheusServiceAccount=monitoring/prometheus-k8s",
			append([]string{"ClusterRoleBinding//swa-metrics-reader-prometheus"}, scraper...)},
		{"metrics.tls.certManager.enabled=true", certManager},
		{"metrics.prometheusRule.enabled=true", []string{"PrometheusRule/operators/swa-operator"}},
		{"metrics.dashboard.enabled=true", []string{"ConfigMap/operators/swa-operator-dashboard"}},
		{"metrics.dashboard.enabled=true,metrics.dashboard.namespace=grafana", []string{"ConfigMap/grafana/swa-operator-dashboard"}},
	} {
		objs := template(t, "--set", tc.set)
		want := slices.Sorted(slices.Values(append(slices.Clone(base), tc.adds...)))
		if got := keys(objs); !slices.Equal(got, want) {
			t.Errorf("%s renders\n  %s\nwant the defaults plus %v", tc.set, strings.Join(got, "\n  "), tc.adds)
		}
	}

	objs := template(t, "--set", "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true,metrics.tls.certManager.enabled=true",
		"--set", "metrics.serviceMonitor.labels.release=kps,metrics.serviceMonitor.prometheusServiceAccount=monitoring/prometheus-k8s")
	svc := as[corev1.Service](t, mustFind(t, objs, "Service", "operators", "swa-controller-manager-metrics-service"))
	sm := mustFind(t, objs, "ServiceMonitor", "operators", "swa-controller-manager")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the metrics Service's labels %v", sel, svc.Labels)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != svc.Spec.Ports[0].Name || eps[0].(map[string]any)["honorLabels"] != true {
		t.Errorf("ServiceMonitor endpoints %v: want the Service's port %q with honorLabels", eps, svc.Spec.Ports[0].Name)
	}
	if sm.GetLabels()["release"] != "kps" {
		t.Errorf("ServiceMonitor labels %v: no release=kps", sm.GetLabels())
	}
	binding := as[rbacv1.ClusterRoleBinding](t, mustFind(t, objs, "ClusterRoleBinding", "", "swa-metrics-reader-prometheus"))
	if binding.RoleRef.Name != "swa-metrics-reader" || !reflect.DeepEqual(binding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "monitoring", Name: "prometheus-k8s"}}) {
		t.Errorf("metrics reader binding %+v", binding)
	}

	rule := mustFind(t, objs, "PrometheusRule", "operators", "swa-operator")
	src := parse(t, readFile(t, "config/prometheus/prometheusrule.yaml"))[0]
	if !reflect.DeepEqual(rule.Object["spec"], src.Object["spec"]) {
		t.Errorf("PrometheusRule spec differs from config/prometheus/prometheusrule.yaml")
	}
	if y, _ := sigsyaml.Marshal(rule.Object); !bytes.Contains(y, []byte("{{ $value | humanize }}")) {
		t.Errorf("the alerts' own templates ({{ $value | humanize }}) did not survive Helm")
	}
	cm := as[corev1.ConfigMap](t, mustFind(t, objs, "ConfigMap", "operators", "swa-operator-dashboard"))
	if cm.Data["dashboard.json"] != strings.TrimRight(string(readFile(t, "config/prometheus/dashboard.json")), "\n") || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap: labels %v, data differs from config/prometheus/dashboard.json: %v", cm.Labels, cm.Data["dashboard.json"] != string(readFile(t, "config/prometheus/dashboard.json")))
	}

	if _, _, err := runHelm(t, "", "template", "swa", chartDir, "--set", "metrics.enabled=false,metrics.serviceMonitor.enabled=true"); err == nil ||
		!strings.Contains(err.Error(), "metrics.serviceMonitor.enabled needs metrics.enabled") {
		t.Errorf("a ServiceMonitor without metrics: %v", err)
	}
	if _, _, err := runHelm(t, "", "template", "swa", chartDir, "--set", "metrics.serviceMonitor.enabled=true"); err == nil ||
		!strings.Contains(err.Error(), "set metrics.tls.certManager.enabled or metrics.tls.secretName") {
		t.Errorf("a ServiceMonitor with no certificate to verify: %v", err)
	}
	if _, _, err := runHelm(t, "", "template", "swa", chartDir, "--set", "metrics.secure=false,metrics.tls.certManager.enabled=true"); err == nil ||
		!strings.Contains(err.Error(), "metrics.tls.certManager.enabled needs metrics.enabled and metrics.secure") {
		t.Errorf("cert-manager for plain HTTP metrics: %v", err)
	}
}

// TestMetricsCert: the ServiceMonitor authenticates with a ServiceAccount
// token Secret bound to the metrics-reader ClusterRole and verifies the
// serving certificate; with cert-manager a Certificate names the metrics
// Service's DNS name, and the Deployment mounts its Secret and serves it
// (--metrics-cert-dir). No rendering skips TLS verification or uses the
// deprecated bearerTokenFile.
func TestMetricsCert(t *testing.T) {
	for _, tc := range []struct {
		name, set, secret string
		certManager       bool
	}{
		{"cert-manager", "metrics.tls.certManager.enabled=true", "swa-metrics-server-cert", true},
		{"admin's Secret", "metrics.tls.secretName=my-metrics-cert", "my-metrics-cert", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runHelm(t, "", "template", "swa", chartDir, "-n", "operators",
				"--set", "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.prometheusServiceAccount=monitoring/prometheus-k8s,"+tc.set)
			if err != nil {
				t.Fatal(err)
			}
			objs := parse(t, []byte(out))
			dnsName := "swa-controller-manager-metrics-service.operators.svc"
			mustFind(t, objs, "Service", "operators", "swa-controller-manager-metrics-service")

			cert := find(objs, "Certificate", "operators", "swa-metrics-server-cert")
			if (cert != nil) != tc.certManager {
				t.Fatalf("Certificate rendered: %v, want %v", cert != nil, tc.certManager)
			}
			if cert != nil {
				dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
				secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
				if !slices.Contains(dnsNames, dnsName) || secretName != tc.secret {
					t.Errorf("Certificate dnsNames %v, secretName %q: want %s and %s", dnsNames, secretName, dnsName, tc.secret)
				}
				issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
				mustFind(t, objs, "Issuer", "operators", issuer)
			}
			checkMetricsCertMount(t, as[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "operators", "swa-controller-manager")), tc.secret)

			sm := mustFind(t, objs, "ServiceMonitor", "operators", "swa-controller-manager")
			ep, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(ep) != 1 {
				t.Fatalf("ServiceMonitor endpoints %v", ep)
			}
			e := ep[0].(map[string]any)
			serverName, _, _ := unstructured.NestedString(e, "tlsConfig", "serverName")
			caSecret, _, _ := unstructured.NestedString(e, "tlsConfig", "ca", "secret", "name")
			caKey, _, _ := unstructured.NestedString(e, "tlsConfig", "ca", "secret", "key")
			if serverName != dnsName || caSecret != tc.secret || caKey != "ca.crt" {
				t.Errorf("ServiceMonitor tlsConfig %v: want serverName %s and ca from %s/ca.crt", e["tlsConfig"], dnsName, tc.secret)
			}
			authType, _, _ := unstructured.NestedString(e, "authorization", "type")
			tokenSecret, _, _ := unstructured.NestedString(e, "authorization", "credentials", "name")
			tokenKey, _, _ := unstructured.NestedString(e, "authorization", "credentials", "key")
			if authType != "Bearer" || tokenKey != "token" {
				t.Errorf("ServiceMonitor authorization %v: want Bearer credentials from a Secret's token", e["authorization"])
			}
			secret := as[corev1.Secret](t, mustFind(t, objs, "Secret", "operators", tokenSecret))
			sa := secret.Annotations[corev1.ServiceAccountNameKey]
			if secret.Type != corev1.SecretTypeServiceAccountToken || sa == "" {
				t.Fatalf("Secret %s: type %s, ServiceAccount %q: want a ServiceAccount token", tokenSecret, secret.Type, sa)
			}
			mustFind(t, objs, "ServiceAccount", "operators", sa)
			bound := false
			for _, o := range objs {
				if o.GetKind() != "ClusterRoleBinding" {
					continue
				}
				b := as[rbacv1.ClusterRoleBinding](t, o)
				if b.RoleRef.Name == "swa-metrics-reader" && slices.Contains(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Namespace: "operators", Name: sa}) {
					bound = true
				}
			}
			if !bound {
				t.Errorf("ServiceAccount operators/%s is not bound to swa-metrics-reader", sa)
			}
			noInsecureScrape(t, out)
		})
	}

	// Every other rendering, too: the defaults, monitoring on, plain HTTP.
	for _, set := range []string{"replicaCount=2", "metrics.secure=false,metrics.serviceMonitor.enabled=true",
		"metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true,metrics.tls.certManager.enabled=true"} {
		out, _, err := runHelm(t, "", "template", "swa", chartDir, "--set", set)
		if err != nil {
			t.Fatal(err)
		}
		noInsecureScrape(t, out)
	}
	// Without a certificate the operator serves a self-signed one it
	// generates: no mount, no flag.
	objs := template(t)
	dep := as[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "operators", "swa-controller-manager"))
	if c := dep.Spec.Template.Spec.Containers[0]; slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-dir") }) || len(c.VolumeMounts) > 0 {
		t.Errorf("the defaults mount a metrics certificate: args %v, mounts %v", c.Args, c.VolumeMounts)
	}
}

// checkMetricsCertMount: the Deployment mounts the Secret read-only and
// passes its mount path as --metrics-cert-dir.
func checkMetricsCertMount(t *testing.T, dep *appsv1.Deployment, secret string) {
	t.Helper()
	var volume string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			volume = v.Name
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	var mountPath string
	for _, m := range c.VolumeMounts {
		if m.Name == volume && m.ReadOnly {
			mountPath = m.MountPath
		}
	}
	if volume == "" || mountPath == "" || !slices.Contains(c.Args, "--metrics-cert-dir="+mountPath) {
		t.Errorf("Deployment %s: volume of Secret %s %q, mounted read-only at %q, args %v: want it mounted and passed as --metrics-cert-dir", dep.Name, secret, volume, mountPath, c.Args)
	}
}

// noInsecureScrape: no ServiceMonitor field the Prometheus Operator
// deprecates (bearerTokenFile) or that turns off TLS verification.
func noInsecureScrape(t *testing.T, rendered string) {
	t.Helper()
	for _, bad := range []string{"bearerTokenFile", "insecureSkipVerify"} {
		if strings.Contains(rendered, bad) {
			t.Errorf("the rendering contains %s", bad)
		}
	}
}

// TestChannels: a ConfigMap or any volume is mounted read-only at
// channels.mountPath and passed as --channels-dir; both at once fail.
func TestChannels(t *testing.T) {
	deployment := func(args ...string) *appsv1.Deployment {
		return as[appsv1.Deployment](t, mustFind(t, template(t, args...), "Deployment", "operators", "swa-controller-manager"))
	}
	for _, tc := range []struct {
		name   string
		args   []string
		mount  string
		volume corev1.VolumeSource
	}{
		{"configMap", []string{"--set", "channels.configMap.name=swa-channels,channels.configMap.items[0].key=stable,channels.configMap.items[0].path=stable"},
			"/channels", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "swa-channels"},
				Items:                []corev1.KeyToPath{{Key: "stable", Path: "stable"}}}}},
		{"any volume", []string{"--set", "channels.volume.persistentVolumeClaim.claimName=channels,channels.mountPath=/srv/channels"},
			"/srv/channels", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "channels"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := deployment(tc.args...).Spec.Template.Spec
			c := spec.Containers[0]
			if !slices.Contains(c.Args, "--channels-dir="+tc.mount) {
				t.Errorf("args %q: no --channels-dir=%s", c.Args, tc.mount)
			}
			if want := []corev1.VolumeMount{{Name: "channels", MountPath: tc.mount, ReadOnly: true}}; !reflect.DeepEqual(c.VolumeMounts, want) {
				t.Errorf("volumeMounts %+v, want %+v", c.VolumeMounts, want)
			}
			if want := []corev1.Volume{{Name: "channels", VolumeSource: tc.volume}}; !reflect.DeepEqual(spec.Volumes, want) {
				t.Errorf("volumes %+v, want %+v", spec.Volumes, want)
			}
		})
	}
	if _, _, err := runHelm(t, "", "template", "swa", chartDir, "--set", "channels.configMap.name=a,channels.volume.emptyDir.medium=Memory"); err == nil ||
		!strings.Contains(err.Error(), "not both") {
		t.Errorf("configMap and volume together: %v", err)
	}
}

// TestWatchNamespaces: namespace mode renders config/namespaced's RBAC: a
// Role and RoleBinding per watched namespace with the namespaced rules, the
// cluster-scoped rules only in a ClusterRole, no cluster-wide manager-role
// binding, and the flag.
func TestWatchNamespaces(t *testing.T) {
	objs := template(t, "--set", "watchNamespaces={team-a,team-b}")
	for _, gone := range []string{"ClusterRole//swa-manager-role", "ClusterRoleBinding//swa-manager-rolebinding"} {
		if slices.Contains(keys(objs), gone) {
			t.Errorf("namespace mode renders %s", gone)
		}
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "swa-controller-manager", Namespace: "operators"}
	wantRole := as[rbacv1.Role](t, parse(t, readFile(t, "config/namespaced/namespace-rbac/role.yaml"))[0])
	for _, ns := range []string{"team-a", "team-b"} {
		role := as[rbacv1.Role](t, mustFind(t, objs, "Role", ns, "swa-manager-role"))
		if !reflect.DeepEqual(role.Rules, wantRole.Rules) {
			t.Errorf("Role %s/swa-manager-role rules differ from config/namespaced/namespace-rbac/role.yaml", ns)
		}
		b := as[rbacv1.RoleBinding](t, mustFind(t, objs, "RoleBinding", ns, "swa-manager-rolebinding"))
		if b.RoleRef.Kind != "Role" || b.RoleRef.Name != "swa-manager-role" || !reflect.DeepEqual(b.Subjects, []rbacv1.Subject{sa}) {
			t.Errorf("RoleBinding %s: %+v", ns, b)
		}
	}
	wantCluster := as[rbacv1.ClusterRole](t, parse(t, readFile(t, "config/namespaced/cluster-rbac/cluster_role.yaml"))[0])
	cr := as[rbacv1.ClusterRole](t, mustFind(t, objs, "ClusterRole", "", "swa-manager-cluster-role"))
	if !reflect.DeepEqual(cr.Rules, wantCluster.Rules) {
		t.Errorf("ClusterRole swa-manager-cluster-role rules differ from config/namespaced/cluster-rbac/cluster_role.yaml")
	}
	crb := as[rbacv1.ClusterRoleBinding](t, mustFind(t, objs, "ClusterRoleBinding", "", "swa-manager-cluster-rolebinding"))
	if crb.RoleRef.Name != "swa-manager-cluster-role" || !reflect.DeepEqual(crb.Subjects, []rbacv1.Subject{sa}) {
		t.Errorf("ClusterRoleBinding: %+v", crb)
	}
	c := as[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "operators", "swa-controller-manager")).Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--watch-namespaces=team-a,team-b") {
		t.Errorf("args %q: no --watch-namespaces=team-a,team-b", c.Args)
	}
	// No rule of the namespace mode writes anything cluster-wide.
	for _, r := range cr.Rules {
		for _, v := range r.Verbs {
			reviews := slices.Contains(r.Resources, "tokenreviews") || slices.Contains(r.Resources, "subjectaccessreviews")
			if !slices.Contains([]string{"get", "list", "watch"}, v) && (v != "create" || !reviews) {
				t.Errorf("cluster-wide rule %+v: verb %s", r, v)
			}
		}
	}
}

// TestTestHook: the `helm test` Pod is a test hook, meets the restricted
// Pod Security Standard on its own, and checks the release's operator pods
// and the CRD's API.
func TestTestHook(t *testing.T) {
	objs := template(t)
	pod := as[corev1.Pod](t, mustFind(t, objs, "Pod", "operators", "swa-test"))
	if pod.Annotations["helm.sh/hook"] != "test" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.ServiceAccountName != "swa-test" {
		t.Errorf("test Pod: annotations %v, restartPolicy %s, serviceAccount %s", pod.Annotations, pod.Spec.RestartPolicy, pod.Spec.ServiceAccountName)
	}
	dep := as[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "operators", "swa-controller-manager"))
	init := pod.Spec.InitContainers
	if len(init) != 1 || len(pod.Spec.Containers) != 1 {
		t.Fatalf("want 1 init container and 1 container, got %d and %d", len(init), len(pod.Spec.Containers))
	}
	var selector string
	for _, a := range init[0].Args {
		selector = strings.TrimPrefix(a, "--selector=")
		if selector != a {
			break
		}
		selector = ""
	}
	sel, err := labels.Parse(selector)
	if err != nil || selector == "" || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("the readiness check's selector %q (%v) does not select the operator's pods %v", selector, err, dep.Spec.Template.Labels)
	}
	if !slices.Contains(pod.Spec.Containers[0].Args, "--raw=/apis/example.com/v1") {
		t.Errorf("the CRD check's args %q", pod.Spec.Containers[0].Args)
	}
	role := as[rbacv1.Role](t, mustFind(t, objs, "Role", "operators", "swa-test"))
	if want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}; !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("test Role rules %+v, want only reading pods", role.Rules)
	}
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", psc)
	}
	for _, c := range append(init, pod.Spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s securityContext %+v: not restricted", c.Name, sc)
		}
	}
}

// TestGeneratedFilesCurrent: the chart's copies (make helm-sync), the
// namespace-mode RBAC split (hack/rbacsplit) and the README's values table
// (make helm-docs) are current.
func TestGeneratedFilesCurrent(t *testing.T) {
	for chartFile, source := range map[string]string{
		chartDir + "/files/manager-role.yaml":            "config/rbac/role.yaml",
		chartDir + "/files/manager-namespaced-role.yaml": "config/namespaced/namespace-rbac/role.yaml",
		chartDir + "/files/manager-cluster-role.yaml":    "config/namespaced/cluster-rbac/cluster_role.yaml",
		chartDir + "/files/prometheusrule.yaml":          "config/prometheus/prometheusrule.yaml",
		chartDir + "/files/dashboard.json":               "config/prometheus/dashboard.json",
	} {
		if !bytes.Equal(readFile(t, chartFile), readFile(t, source)) {
			t.Errorf("%s differs from %s: run make helm-sync", chartFile, source)
		}
	}

	out := t.TempDir()
	for _, d := range []string{"namespace-rbac", "cluster-rbac"} {
		if err := os.Mkdir(filepath.Join(out, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	goRun(t, "./hack/rbacsplit", "config/rbac/role.yaml", out)
	for _, f := range []string{"namespace-rbac/role.yaml", "cluster-rbac/cluster_role.yaml"} {
		got, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, readFile(t, "config/namespaced/"+f)) {
			t.Errorf("config/namespaced/%s is stale: run make helm-sync", f)
		}
	}
	goRun(t, "./hack/helmdocs", "-check", chartDir)
}

func goRun(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"run"}, args...)...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go run %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestLint: helm lint --strict passes with the defaults, with every
// optional part on, and with an existing ServiceAccount.
func TestLint(t *testing.T) {
	for _, set := range []string{
		"replicaCount=2",
		"metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true,metrics.tls.certManager.enabled=true,watchNamespaces={a,b},channels.configMap.name=c",
		"metrics.serviceMonitor.enabled=true,metrics.tls.secretName=mine",
		"metrics.enabled=false,leaderElection.enabled=false,tenantRoles.enabled=false",
		"serviceAccount.create=false,serviceAccount.name=x",
	} {
		if out, _, err := runHelm(t, "", "lint", "--strict", chartDir, "--set", set); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}
