package install_test

import (
	"bytes"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/hack/install"
)

var kustomize = install.Kustomize

// wantDefault is everything config/default installs.
var wantDefault = []string{
	"ClusterRole//simplewebapp-admin",
	"ClusterRole//simplewebapp-editor",
	"ClusterRole//simplewebapp-manager-role",
	"ClusterRole//simplewebapp-metrics-reader",
	"ClusterRole//simplewebapp-viewer",
	"ClusterRoleBinding//simplewebapp-manager-rolebinding",
	"CustomResourceDefinition//simplewebapps.example.com",
	"Deployment/simplewebapp-system/simplewebapp-controller-manager",
	"Namespace//simplewebapp-system",
	"Role/simplewebapp-system/simplewebapp-leader-election-role",
	"RoleBinding/simplewebapp-system/simplewebapp-leader-election-rolebinding",
	"Service/simplewebapp-system/simplewebapp-controller-manager-metrics-service",
	"ServiceAccount/simplewebapp-system/simplewebapp-controller-manager",
}

// generatedRules are the rules of config/rbac/role.yaml (make manifests).
func generatedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	objs := parse(t, readFile(t, "config/rbac/role.yaml"))
	if len(objs) != 1 || objs[0].GetKind() != "ClusterRole" {
		t.Fatalf("config/rbac/role.yaml: want one ClusterRole, got %v", keys(objs))
	}
	return as[rbacv1.ClusterRole](t, objs[0]).Rules
}

// TestKustomizeDefault checks what config/default installs, offline: the set
// of objects, their order, the prefixed names and namespace in every
// reference (RBAC subjects, roleRefs, serviceAccountName), the Deployment
// (replicas, leader election, restricted security context, resources,
// probes, ports) and the metrics Service.
func TestKustomizeDefault(t *testing.T) {
	objs := parse(t, kustomizeDefault(t, ""))
	if got := keys(objs); !slices.Equal(got, wantDefault) {
		t.Fatalf("config/default renders\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wantDefault, "\n  "))
	}
	// kustomize's legacy order: the Namespace and the CRD before anything
	// that needs them, so a plain `kubectl apply -f` works in one pass.
	if objs[0].GetKind() != "Namespace" || objs[1].GetKind() != "CustomResourceDefinition" {
		t.Errorf("order: %s, %s first; want the Namespace, then the CRD", key(objs[0]), key(objs[1]))
	}
	checkInstallObjects(t, objs, namespace, "simplewebapp-")

	ns := as[corev1.Namespace](t, find(t, objs, "Namespace", namespace))
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace label pod-security.kubernetes.io/enforce = %q, want restricted", got)
	}
	dep := as[appsv1.Deployment](t, find(t, objs, "Deployment", deploymentName))
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != defaultImage(t) {
		t.Errorf("image %q, want %q", got, defaultImage(t))
	}
	if !reflect.DeepEqual(dep.Spec.Template.Spec.Containers[0].Args,
		[]string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081", "--allowed-images=docker.io/nginxinc/nginx-unprivileged"}) {
		t.Errorf("args %q", dep.Spec.Template.Spec.Containers[0].Args)
	}
}

// checkInstallObjects checks an install (config/default or the chart) whose
// names all start with prefix and whose namespaced objects are all in ns.
func checkInstallObjects(t *testing.T, objs []*unstructured.Unstructured, ns, prefix string) {
	t.Helper()
	byKey := index(objs)
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" && !strings.HasPrefix(o.GetName(), prefix) {
			t.Errorf("%s: name without the prefix %q", key(o), prefix)
		}
		switch o.GetKind() {
		case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding":
		default:
			if o.GetNamespace() != ns {
				t.Errorf("%s: namespace %q, want %q", key(o), o.GetNamespace(), ns)
			}
		}
	}
	sa := prefix + "controller-manager"
	if byKey["ServiceAccount/"+ns+"/"+sa] == nil {
		t.Fatalf("no ServiceAccount %s/%s", ns, sa)
	}

	// Every binding refers to a role of this install and binds exactly the
	// operator's (prefixed) ServiceAccount in its (final) namespace.
	for _, o := range objs {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		switch o.GetKind() {
		case "RoleBinding":
			b := as[rbacv1.RoleBinding](t, o)
			ref, subjects = b.RoleRef, b.Subjects
			if ref.Kind == "Role" && byKey["Role/"+ns+"/"+ref.Name] == nil {
				t.Errorf("%s: roleRef Role %s is not installed", key(o), ref.Name)
			}
		case "ClusterRoleBinding":
			b := as[rbacv1.ClusterRoleBinding](t, o)
			ref, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		if ref.Kind == "ClusterRole" && byKey["ClusterRole//"+ref.Name] == nil {
			t.Errorf("%s: roleRef ClusterRole %s is not installed", key(o), ref.Name)
		}
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}
		if !reflect.DeepEqual(subjects, want) {
			t.Errorf("%s: subjects %+v, want %+v", key(o), subjects, want)
		}
	}

	// The controller's ClusterRole is exactly the generated one; it includes
	// the metrics endpoint's TokenReviews and SubjectAccessReviews.
	rules := as[rbacv1.ClusterRole](t, byKey["ClusterRole//"+prefix+"manager-role"]).Rules
	if !reflect.DeepEqual(rules, generatedRules(t)) {
		t.Errorf("ClusterRole %smanager-role rules differ from config/rbac/role.yaml:\n%s", prefix, toYAML(t, byKey["ClusterRole//"+prefix+"manager-role"]))
	}
	for _, need := range []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	} {
		if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, need) }) {
			t.Errorf("ClusterRole %smanager-role lacks %+v (secure metrics)", prefix, need)
		}
	}
	if le := byKey["Role/"+ns+"/"+prefix+"leader-election-role"]; le != nil {
		r := as[rbacv1.Role](t, le)
		if !slices.ContainsFunc(r.Rules, func(p rbacv1.PolicyRule) bool {
			return slices.Contains(p.APIGroups, "coordination.k8s.io") && slices.Contains(p.Resources, "leases") && slices.Contains(p.Verbs, "update")
		}) {
			t.Errorf("%s: no update on leases", key(le))
		}
	}

	dep := as[appsv1.Deployment](t, byKey["Deployment/"+ns+"/"+prefix+"controller-manager"])
	pod := dep.Spec.Template
	if sel, err := metav1LabelSelector(dep); err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("Deployment selector %v does not select its pod template labels %v (%v)", dep.Spec.Selector, pod.Labels, err)
	}
	if got := ptr.Deref(dep.Spec.Replicas, 1); got != 2 {
		t.Errorf("replicas %d, want 2", got)
	}
	if pod.Spec.ServiceAccountName != sa {
		t.Errorf("serviceAccountName %q, want %q", pod.Spec.ServiceAccountName, sa)
	}
	psc := pod.Spec.SecurityContext
	if psc == nil || !ptr.Deref(psc.RunAsNonRoot, false) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
		ptr.Deref(sc.Privileged, false) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("container securityContext %+v: want no privilege escalation, read-only root, drop ALL", sc)
	}
	if !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("args %q: no --leader-elect", c.Args)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[res]; !ok {
			t.Errorf("no %s request", res)
		}
		if _, ok := c.Resources.Limits[res]; !ok {
			t.Errorf("no %s limit", res)
		}
	}
	port := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		return 0
	}
	if port("metrics") != 8443 {
		t.Errorf("container port metrics = %d, want 8443", port("metrics"))
	}
	for what, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != what {
			t.Errorf("probe %s: %+v", what, probe)
			continue
		}
		p := probe.HTTPGet.Port
		if p.IntValue() != 8081 && port(p.String()) != 8081 {
			t.Errorf("probe %s on port %s, want 8081", what, p.String())
		}
	}

	// The metrics Service reaches the pods' metrics port.
	svc := as[corev1.Service](t, byKey["Service/"+ns+"/"+prefix+"controller-manager-metrics-service"])
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("metrics Service selector %v does not select the pods %v", svc.Spec.Selector, pod.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 || port(svc.Spec.Ports[0].TargetPort.String()) != 8443 {
		t.Errorf("metrics Service ports %+v, want 8443 -> container port metrics", svc.Spec.Ports)
	}
}

func metav1LabelSelector(dep *appsv1.Deployment) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(dep.Spec.Selector)
}

// filepathGlob returns the sorted base names of the files matching pattern
// under root.
func filepathGlob(root, pattern string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(root, pattern))
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	sort.Strings(m)
	return m, err
}

// TestKustomizeImage: make deploy IMG=... changes the image and nothing else.
func TestKustomizeImage(t *testing.T) {
	base := kustomizeDefault(t, "")
	for _, img := range []string{
		"registry.example:5000/team/simplewebapp-operator:v1.2.3",
		"simplewebapp-operator:dev",
		"registry.example/simplewebapp-operator@sha256:" + strings.Repeat("ab", 32),
	} {
		got := kustomizeDefault(t, img)
		want := bytes.Replace(base, []byte("image: "+defaultImage(t)+"\n"), []byte("image: "+img+"\n"), 1)
		if bytes.Equal(want, base) {
			t.Fatalf("config/default has no %q image line", defaultImage(t))
		}
		if !bytes.Equal(got, want) {
			t.Errorf("IMG=%s: the render differs from config/default by more than the image:\n%s", img, got)
		}
	}
}

// TestHelmChartMatchesKustomize renders the chart with release name
// "simplewebapp" in simplewebapp-system: the same objects as config/default,
// up to labels, except the Namespace (Helm's release namespace is created
// before the install; see docs/install.md).
func TestHelmChartMatchesKustomize(t *testing.T) {
	kobjs := parse(t, kustomizeDefault(t, ""))
	hobjs := parse(t, helmTemplate(t, chartRelease, namespace))

	var want []string
	for _, k := range wantDefault {
		if !strings.HasPrefix(k, "Namespace/") {
			want = append(want, k)
		}
	}
	if got := keys(hobjs); !slices.Equal(got, want) {
		t.Fatalf("the chart renders\n  %s\nwant (config/default without the Namespace)\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	checkInstallObjects(t, hobjs, namespace, chartRelease+"-")

	kIndex := index(kobjs)
	for _, h := range hobjs {
		k := kIndex[key(h)]
		if got, want := withoutLabels(h), withoutLabels(k); !reflect.DeepEqual(got.Object, want.Object) {
			t.Errorf("%s differs (labels and selectors aside):\n--- chart\n%s--- config/default\n%s", key(h), toYAML(t, got), toYAML(t, want))
		}
	}
}

// withoutLabels drops what legitimately differs between the chart and
// config/default: labels, annotations and the label selectors (the chart adds
// app.kubernetes.io/instance, version, managed-by and helm.sh/chart).
func withoutLabels(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	unstructured.RemoveNestedField(u.Object, "metadata", "labels")
	unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
	switch u.GetKind() {
	case "Deployment":
		unstructured.RemoveNestedField(u.Object, "spec", "selector")
		unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata")
	case "Service":
		unstructured.RemoveNestedField(u.Object, "spec", "selector")
	}
	return u
}

// TestHelmChartCopiesInSync: the chart carries copies of the generated CRD
// and ClusterRole; make helm-sync refreshes them after make manifests.
func TestHelmChartCopiesInSync(t *testing.T) {
	for chartFile, generated := range map[string]string{
		chartDir + "/crds/example.com_simplewebapps.yaml": "config/crd/bases/example.com_simplewebapps.yaml",
		chartDir + "/files/manager-role.yaml":             "config/rbac/role.yaml",
	} {
		if !bytes.Equal(readFile(t, chartFile), readFile(t, generated)) {
			t.Errorf("%s differs from %s: run make helm-sync", chartFile, generated)
		}
	}
	crds, err := filepathGlob(repoRoot, "config/crd/bases/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	chartCRDs, err := filepathGlob(repoRoot, chartDir+"/crds/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(crds, chartCRDs) {
		t.Errorf("CRD files: config/crd/bases has %v, the chart's crds/ %v: run make helm-sync", crds, chartCRDs)
	}
}

// TestHelmValues: image, replicas, resources, leader election and metrics
// are values.
func TestHelmValues(t *testing.T) {
	objs := parse(t, helmTemplate(t, "swa", "operators",
		"--set", "image.repository=registry.example/team/simplewebapp-operator,image.tag=v1.2.3",
		"--set", "replicaCount=3,leaderElection.enabled=false,metrics.enabled=false",
		"--set", "resources.limits.memory=512Mi",
		"--set", "extraArgs[0]=--zap-log-level=debug",
	))
	want := []string{
		"ClusterRole//swa-admin",
		"ClusterRole//swa-editor",
		"ClusterRole//swa-manager-role",
		"ClusterRole//swa-viewer",
		"ClusterRoleBinding//swa-manager-rolebinding",
		"CustomResourceDefinition//simplewebapps.example.com",
		"Deployment/operators/swa-controller-manager",
		// Without leader election the Role holds only the roll-out states.
		"Role/operators/swa-leader-election-role",
		"RoleBinding/operators/swa-leader-election-rolebinding",
		"ServiceAccount/operators/swa-controller-manager",
	}
	if got := keys(objs); !slices.Equal(got, want) {
		t.Fatalf("renders\n  %s\nwant (no Lease rules, no metrics Service or reader role)\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, rule := range as[rbacv1.Role](t, find(t, objs, "Role", "swa-leader-election-role")).Rules {
		if !slices.Equal(rule.Resources, []string{"configmaps"}) {
			t.Errorf("Role rule %v with leader election off: want only the roll-out states' configmaps", rule)
		}
	}
	dep := as[appsv1.Deployment](t, find(t, objs, "Deployment", "swa-controller-manager"))
	c := dep.Spec.Template.Spec.Containers[0]
	if got := ptr.Deref(dep.Spec.Replicas, 1); got != 3 {
		t.Errorf("replicas %d, want 3", got)
	}
	if c.Image != "registry.example/team/simplewebapp-operator:v1.2.3" {
		t.Errorf("image %q", c.Image)
	}
	if want := []string{"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=:8081", "--allowed-images=docker.io/nginxinc/nginx-unprivileged", "--zap-log-level=debug"}; !slices.Equal(c.Args, want) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	if got := c.Resources.Limits.Memory().String(); got != "512Mi" {
		t.Errorf("memory limit %s, want 512Mi", got)
	}
	if got := c.Resources.Requests.Cpu().String(); got != "10m" {
		t.Errorf("cpu request %s, want the default 10m", got)
	}
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			t.Errorf("metrics port %d with metrics disabled", p.ContainerPort)
		}
	}

	digest := "sha256:" + strings.Repeat("ab", 32)
	objs = parse(t, helmTemplate(t, "swa", "operators", "--set", "image.digest="+digest))
	if got := as[appsv1.Deployment](t, find(t, objs, "Deployment", "swa-controller-manager")).Spec.Template.Spec.Containers[0].Image; got != install.ImageName+"@"+digest {
		t.Errorf("image with digest: %q", got)
	}
}

// TestHelmLint: helm lint --strict passes with the defaults and with the
// optional parts off.
func TestHelmLint(t *testing.T) {
	for _, set := range []string{"replicaCount=2", "metrics.enabled=false,leaderElection.enabled=false", "metrics.secure=false"} {
		helm(t, "lint", "--strict", filepath.Join(repoRoot, chartDir), "--set", set)
	}
}
