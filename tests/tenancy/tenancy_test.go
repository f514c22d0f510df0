package tenancy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

const (
	operatorNS = "simplewebapp-system"
	operatorSA = "system:serviceaccount:simplewebapp-system:simplewebapp-controller-manager"
)

// TestTenantRoles: users bound in namespace "team" to the built-in edit,
// view and admin, and one bound to simplewebapp-editor before it exists.
// Installing the tenant roles adds to each exactly the SimpleWebApp rights
// of its role (the `kubectl auth can-i --list` before and after differ by
// those lines only), and the editor creates a SimpleWebApp for real.
func TestTenantRoles(t *testing.T) {
	ctx := t.Context()
	for _, name := range []string{"simplewebapp-admin", "simplewebapp-editor", "simplewebapp-viewer"} {
		if _, err := env.CS.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Fatalf("ClusterRole %s exists before the test installs it", name)
		}
	}
	team := testkit.Namespace(t, env.C, testkit.NS{Name: "team"})
	users := map[string]string{"alice": "edit", "carol": "view", "dave": "admin", "bob": "simplewebapp-editor"}
	for user, role := range users {
		_, err := env.CS.RbacV1().RoleBindings(team).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The authorizer sees new bindings a moment later.
	if err := env.Kubectl.WaitCanI(ctx, 30*time.Second,
		operatortest.CanIWant{Kubeconfig: env.Cluster.Kubeconfig, Args: []string{"--as=alice", "create", "deployments.apps", "-n", team}, Want: "yes"},
		operatortest.CanIWant{Kubeconfig: env.Cluster.Kubeconfig, Args: []string{"--as=carol", "list", "pods", "-n", team}, Want: "yes"},
		operatortest.CanIWant{Kubeconfig: env.Cluster.Kubeconfig, Args: []string{"--as=dave", "create", "rolebindings.rbac.authorization.k8s.io", "-n", team}, Want: "yes"},
	); err != nil {
		t.Fatal(err)
	}
	before := map[string][]string{}
	for user := range users {
		before[user] = canIList(t, user, team)
		if slices.ContainsFunc(before[user], func(l string) bool { return strings.HasPrefix(l, "simplewebapps.") }) {
			t.Fatalf("%s can already do something with SimpleWebApps:\n%s", user, strings.Join(before[user], "\n"))
		}
	}

	// The tenant roles as config/default installs them.
	var roles []*unstructured.Unstructured
	for _, o := range parse(t, kustomize(t, filepath.Join(env.Root, "config/default"))) {
		for label := range o.GetLabels() {
			if o.GetKind() == "ClusterRole" && strings.HasPrefix(label, "rbac.authorization.k8s.io/aggregate-to-") {
				roles = append(roles, o)
			}
		}
	}
	if len(roles) != 3 {
		t.Fatalf("config/default has %d aggregated ClusterRoles, want 3", len(roles))
	}
	t0 := time.Now()
	apply(t, roles)
	testkit.WaitFor(t, time.Minute, "edit (aggregated) to allow creating SimpleWebApps", func(context.Context) (bool, string) {
		answer, _ := env.Kubectl.CanI(env.Cluster.Kubeconfig, "--as=alice", "create", "simplewebapps.example.com", "-n", team)
		return answer == "yes", answer
	}, testkit.Every(50*time.Millisecond))
	t.Logf("FIGURE tenant roles applied → edit allows creating SimpleWebApps: %s", time.Since(t0).Round(100*time.Millisecond))

	write := "[create delete deletecollection get list patch update watch]"
	gains := map[string][]string{
		"edit":                {"simplewebapps.example.com [] [] " + write, "simplewebapps.example.com/scale [] [] [get patch update]", "simplewebapps.example.com/status [] [] [get]"},
		"admin":               {"simplewebapps.example.com [] [] " + write, "simplewebapps.example.com/scale [] [] [get patch update]", "simplewebapps.example.com/status [] [] [get]"},
		"simplewebapp-editor": {"simplewebapps.example.com [] [] " + write, "simplewebapps.example.com/scale [] [] [get patch update]", "simplewebapps.example.com/status [] [] [get]"},
		"view":                {"simplewebapps.example.com [] [] [get list watch]", "simplewebapps.example.com/status [] [] [get]"},
	}
	for user, role := range users {
		var after []string
		// The aggregation controller fills each built-in role on its own.
		testkit.WaitFor(t, time.Minute, user+" ("+role+") gains the SimpleWebApp rights", func(context.Context) (bool, string) {
			after = canIList(t, user, team)
			added, removed := diff(before[user], after)
			return slices.Equal(added, gains[role]) && len(removed) == 0,
				fmt.Sprintf("added %q, removed %q", added, removed)
		}, testkit.Every(100*time.Millisecond))
	}

	// The editor creates one for real, the viewer cannot, nobody outside team can.
	sample := filepath.Join(env.Root, "config/samples/my-webapp.yaml")
	if _, err := env.Kubectl.Admin("--as=bob", "-n", team, "create", "-f", sample); err != nil {
		t.Fatalf("simplewebapp-editor creating a SimpleWebApp: %v", err)
	}
	if _, err := env.Kubectl.Admin("--as=carol", "-n", team, "delete", "swa", "my-webapp"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("view deleting a SimpleWebApp: %v, want forbidden", err)
	}
	for _, check := range [][]string{
		{"--as=bob", "create", "simplewebapps.example.com", "-n", "default"},
		{"--as=bob", "create", "deployments.apps", "-n", team},
		{"--as=carol", "patch", "simplewebapps.example.com", "--subresource=status", "-n", team},
		{"--as=alice", "patch", "simplewebapps.example.com", "--subresource=status", "-n", team},
	} {
		if answer, _ := env.Kubectl.CanI(env.Cluster.Kubeconfig, check...); answer != "no" {
			t.Errorf("can-i %v: %s, want no", check, answer)
		}
	}
}

// TestNamespaceMode installs config/namespaced, changed to watch namespace
// "a" the way its comments say (a watch-a/ directory and the flag), checks
// the operator's rights with `kubectl auth can-i`, then runs the installed
// operator: a SimpleWebApp in a becomes Ready, one in b is never touched.
func TestNamespaceMode(t *testing.T) {
	ctx := t.Context()
	a := testkit.Namespace(t, env.C, testkit.NS{Name: "a", WaitForServiceAccount: true})
	b := testkit.Namespace(t, env.C, testkit.NS{Name: "b", WaitForServiceAccount: true})
	dir := overlay(t, map[string]string{
		"kustomization.yaml": `resources:
- {{root}}/config/namespaced
- watch-a
patches:
- target: {kind: Role, namespace: default, name: simplewebapp-manager-role}
  patch: '{"$patch": "delete", "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "simplewebapp-manager-role", "namespace": "default"}}'
- target: {kind: RoleBinding, namespace: default, name: simplewebapp-manager-rolebinding}
  patch: '{"$patch": "delete", "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "simplewebapp-manager-rolebinding", "namespace": "default"}}'
- target: {kind: Deployment, name: simplewebapp-controller-manager}
  patch: |
    - {op: test, path: /spec/template/spec/containers/0/args/4, value: --watch-namespaces=default}
    - {op: replace, path: /spec/template/spec/containers/0/args/4, value: --watch-namespaces=a}
`,
		"watch-a/kustomization.yaml": `namespace: a
namePrefix: simplewebapp-
resources:
- {{root}}/config/namespaced/namespace-rbac
`,
	})
	objs := parse(t, kustomize(t, dir))
	var rbac []string
	for _, o := range objs {
		if strings.HasSuffix(o.GetKind(), "Binding") {
			rbac = append(rbac, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
		}
	}
	slices.Sort(rbac)
	wantRBAC := []string{
		"ClusterRoleBinding//simplewebapp-manager-cluster-rolebinding",
		"RoleBinding/a/simplewebapp-manager-rolebinding",
		"RoleBinding/simplewebapp-system/simplewebapp-leader-election-rolebinding",
	}
	if !slices.Equal(rbac, wantRBAC) {
		t.Fatalf("bindings %q, want %q", rbac, wantRBAC)
	}
	checkSplitAgainstDiscovery(t, objs)
	apply(t, objs)

	// The operator's rights: what it needs in a and in its own namespace,
	// reads of its CRD, and no write anywhere else.
	as := "--as=" + operatorSA
	yes := [][]string{
		{"create", "deployments.apps", "-n", a},
		{"patch", "simplewebapps.example.com", "--subresource=status", "-n", a},
		{"watch", "simplewebapps.example.com", "-n", a},
		{"create", "events.events.k8s.io", "-n", a},
		{"get", "customresourcedefinitions.apiextensions.k8s.io/simplewebapps.example.com"},
		{"update", "leases.coordination.k8s.io", "-n", operatorNS},
	}
	no := [][]string{
		{"create", "deployments.apps", "--all-namespaces"},
		{"patch", "deployments.apps", "--all-namespaces"},
		{"delete", "deployments.apps", "--all-namespaces"},
		{"create", "services", "--all-namespaces"},
		{"delete", "configmaps", "--all-namespaces"},
		{"create", "poddisruptionbudgets.policy", "--all-namespaces"},
		{"create", "horizontalpodautoscalers.autoscaling", "--all-namespaces"},
		{"patch", "simplewebapps.example.com", "--all-namespaces"},
		{"patch", "simplewebapps.example.com", "--subresource=status", "--all-namespaces"},
		{"create", "events.events.k8s.io", "--all-namespaces"},
		{"update", "leases.coordination.k8s.io", "--all-namespaces"},
		{"create", "secrets", "--all-namespaces"},
		{"create", "rolebindings.rbac.authorization.k8s.io", "--all-namespaces"},
		{"create", "clusterroles.rbac.authorization.k8s.io"},
		{"update", "customresourcedefinitions.apiextensions.k8s.io"},
		{"create", "namespaces"},
		{"list", "simplewebapps.example.com", "--all-namespaces"},
		{"create", "deployments.apps", "-n", b},
		{"list", "simplewebapps.example.com", "-n", b},
	}
	var checks []operatortest.CanIWant
	for _, q := range yes {
		checks = append(checks, operatortest.CanIWant{Kubeconfig: env.Cluster.Kubeconfig, Args: append([]string{as}, q...), Want: "yes"})
	}
	if err := env.Kubectl.WaitCanI(ctx, 30*time.Second, checks...); err != nil {
		t.Fatal(err)
	}
	for _, q := range no {
		if answer, err := env.Kubectl.CanI(env.Cluster.Kubeconfig, append([]string{as}, q...)...); answer != "no" {
			t.Errorf("the operator can-i %s: %q (%v), want no", strings.Join(q, " "), answer, err)
		}
	}
	t.Logf("FIGURE namespace mode: %d can-i answers yes as needed, %d writes or reads outside a answer no", len(yes), len(no))

	// b's SimpleWebApp exists before the operator starts: a cluster-wide
	// list would see it at once.
	inB := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "outside", Namespace: b},
		Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Message: "not watched"}}
	if err := env.C.Create(ctx, inB); err != nil {
		t.Fatal(err)
	}
	createdRV := inB.ResourceVersion

	op, err := env.StartInstalled(ctx, operatorNS, "simplewebapp-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Kill)
	diag := testkit.Diag(func() string { return "--- operator log ---\n" + op.LogTail(30) })
	if err := op.WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, op.LogTail(30))
	}
	if !slices.Contains(op.Args(), "--watch-namespaces=a") {
		t.Fatalf("the installed operator runs with %q: no --watch-namespaces=a", op.Args())
	}
	inA := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "inside", Namespace: a},
		Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](2), Message: "watched"}}
	if err := env.C.Create(ctx, inA); err != nil {
		t.Fatal(err)
	}
	took := testkit.WaitFor(t, 2*time.Minute, "SimpleWebApp a/inside Ready with only namespaced rights", func(ctx context.Context) (bool, string) {
		if err := env.C.Get(ctx, client.ObjectKeyFromObject(inA), inA); err != nil {
			return false, err.Error()
		}
		return apimeta.IsStatusConditionTrue(inA.Status.Conditions, "Ready"), fmt.Sprintf("%+v", inA.Status.Conditions)
	}, diag, testkit.Every(100*time.Millisecond))
	t.Logf("FIGURE namespace mode: a SimpleWebApp in the watched namespace Ready in %s", took.Round(time.Millisecond))

	testkit.HoldsFor(t, 5*time.Second, "the SimpleWebApp in b untouched (same resourceVersion, no status, no children)", func(ctx context.Context) (bool, string) {
		got := &webappv1.SimpleWebApp{}
		if err := env.C.Get(ctx, client.ObjectKeyFromObject(inB), got); err != nil {
			return false, err.Error()
		}
		if got.ResourceVersion != createdRV || len(got.Finalizers) > 0 || got.Status.ObservedGeneration != 0 || len(got.Status.Conditions) > 0 {
			return false, fmt.Sprintf("resourceVersion %s (created %s), finalizers %v, status %+v", got.ResourceVersion, createdRV, got.Finalizers, got.Status)
		}
		for _, gvk := range [][2]string{{"apps/v1", "DeploymentList"}, {"v1", "ServiceList"}, {"v1", "ConfigMapList"}} {
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion(gvk[0])
			l.SetKind(gvk[1])
			opts := []client.ListOption{client.InNamespace(b)}
			if gvk[1] == "ConfigMapList" { // every namespace has kube-root-ca.crt
				opts = append(opts, client.MatchingLabels{"app.kubernetes.io/managed-by": "simplewebapp-operator"})
			}
			if err := env.C.List(ctx, l, opts...); err != nil {
				return false, err.Error()
			}
			if len(l.Items) > 0 {
				return false, fmt.Sprintf("%s in b: %s", l.GetKind(), l.Items[0].GetName())
			}
		}
		return true, ""
	}, diag, testkit.Every(250*time.Millisecond))
	if lines := op.LogLinesWith("forbidden", 5); lines != "" {
		t.Errorf("the operator met forbidden requests (it asked for more than namespace mode grants):\n%s", lines)
	}
}

// checkSplitAgainstDiscovery: every resource of the namespace-mode Roles
// is namespaced and every resource of its ClusterRole cluster-scoped, as the
// API server's discovery says (hack/rbacsplit's lists are right).
func checkSplitAgainstDiscovery(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	_, lists, err := env.CS.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	namespaced := map[string]bool{}
	for _, l := range lists {
		group := strings.Split(l.GroupVersion, "/")[0]
		if !strings.Contains(l.GroupVersion, "/") {
			group = ""
		}
		for _, r := range l.APIResources {
			namespaced[group+"/"+r.Name] = r.Namespaced
		}
	}
	n := 0
	for _, o := range objs {
		var rules []rbacv1.PolicyRule
		var want bool
		switch {
		case o.GetKind() == "Role" && o.GetName() == "simplewebapp-manager-role":
			rules, want = as[rbacv1.Role](t, o).Rules, true
		case o.GetKind() == "ClusterRole" && o.GetName() == "simplewebapp-manager-cluster-role":
			rules, want = as[rbacv1.ClusterRole](t, o).Rules, false
		default:
			continue
		}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					got, ok := namespaced[g+"/"+res]
					if parent, _, sub := strings.Cut(res, "/"); !ok && sub {
						// finalizers is no served subresource (discovery does
						// not list it); it has its resource's scope.
						got, ok = namespaced[g+"/"+parent]
					}
					if !ok || got != want {
						t.Errorf("%s %s: %s/%s namespaced=%v (known %v), want %v", o.GetKind(), o.GetName(), g, res, got, ok, want)
					}
					n++
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d resources checked", n)
	}
}

// canIList is `kubectl auth can-i --list` as user in ns: one line per row,
// blanks collapsed, the header left out.
func canIList(t *testing.T, user, ns string) []string {
	t.Helper()
	out, err := env.Kubectl.Admin("auth", "can-i", "--list", "--as="+user, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if i == 0 {
			continue
		}
		// The verbs (the last [...]) sorted: rules merged from several
		// aggregated roles list them in any order.
		if j := strings.LastIndex(l, "["); j >= 0 && strings.HasSuffix(strings.TrimSpace(l), "]") {
			verbs := strings.Fields(strings.Trim(strings.TrimSpace(l[j:]), "[]"))
			slices.Sort(verbs)
			l = l[:j] + "[" + strings.Join(slices.Compact(verbs), " ") + "]"
		}
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// diff is what after adds to before and what it lacks of it.
func diff(before, after []string) (added, removed []string) {
	for _, l := range after {
		if !slices.Contains(before, l) {
			added = append(added, l)
		}
	}
	for _, l := range before {
		if !slices.Contains(after, l) {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// apply server-side applies objs as the cluster admin.
func apply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var b strings.Builder
	for _, o := range objs {
		y, err := sigsyaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	f := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kubectl.Admin("apply", "--server-side", "--field-manager=tenancy-test", "-f", f); err != nil {
		t.Fatal(err)
	}
}
