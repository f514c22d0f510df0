package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

const (
	appName    = "my-webapp"     // metadata.name in the user's files
	deployName = "my-webapp-web" // <name>-web, rendered by the package
	instance   = "app.kubernetes.io/instance=" + appName
	timeout    = 2 * time.Minute
)

// TestUserScenario is what the user does: create the app from their file,
// re-apply it with more replicas and a new message, lose two pods, delete it.
func TestUserScenario(t *testing.T) {
	ctx := t.Context()
	ns := testkit.Namespace(t, env.C, e2eNS)
	// The user's files set no channel: the stable channel's version runs.
	stable := testkit.ChannelVersion(t, "stable")
	diag := func() string { return describeNamespace(ns) }
	sample := func(name string) string { return filepath.Join(env.Root, "config/samples", name) }
	state := func(ctx context.Context) (*app, string) {
		a, err := observe(ctx, ns, appName, deployName)
		if err != nil {
			return nil, err.Error()
		}
		return a, ""
	}
	var created *app // the settled state after step a

	if !t.Run("a/create", func(t *testing.T) {
		start := time.Now()
		if _, err := env.Kubectl.Admin("apply", "-n", ns, "-f", sample("my-webapp.yaml")); err != nil {
			t.Fatal(err)
		}
		if out, err := env.Kubectl.Admin("wait", "--for=condition=Ready", "swa/"+appName, "-n", ns, "--timeout=60s"); err != nil {
			t.Fatalf("%v\n--- operator log tail ---\n%s\n%s", err, env.op.LogTail(40), diag())
		} else {
			t.Logf("kubectl wait --for=condition=Ready returned after %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
		}
		testkit.WaitFor(t, timeout, "3 Ready pods and status Ready with readyReplicas=3", func(ctx context.Context) (bool, string) {
			a, seen := state(ctx)
			if a == nil {
				return false, seen
			}
			created = a
			return a.settledOn(3, stable)
		}, env.waitOpts(diag))
		t.Logf("3 pods Ready in %s (from kubectl apply)", time.Since(start).Round(time.Millisecond))

		checkChildrenOwnedBy(t, ctx, ns, created)
		checkAppliedByOperator(t, &created.dep)
		// Pod Security admission checks pods at creation: that they exist at
		// all in this namespace proves the rendered pods are "restricted".
		t.Logf("pods admitted under pod-security enforce=restricted: %v", podNames(created.pods))
		cms, err := configMapsWith(ctx, ns, created.newestRS.Spec.Template.Spec, "Welcome to my awesome web app!")
		if err != nil || len(cms) == 0 {
			t.Fatalf("no ConfigMap mounted by the pod template holds the message (err %v)\n%s", err, diag())
		}
		t.Logf("message served from ConfigMap %v", cms)
	}) {
		return
	}

	t.Run("events", func(t *testing.T) {
		d := testkit.WaitFor(t, 30*time.Second, "an Applied event from the operator for the SimpleWebApp", func(ctx context.Context) (bool, string) {
			return appliedEvent(ns, created.swa.UID)
		}, env.waitOpts(diag))
		t.Logf("Applied event seen after %s", d.Round(time.Millisecond))
	})

	if !t.Run("b/update", func(t *testing.T) {
		start := time.Now()
		if _, err := env.Kubectl.Admin("apply", "-n", ns, "-f", sample("my-webapp-updated.yaml")); err != nil {
			t.Fatal(err)
		}
		var updated *app
		testkit.WaitFor(t, timeout, "5 Ready pods, all of the new pod template, and status Ready with readyReplicas=5 for the new generation",
			func(ctx context.Context) (bool, string) {
				a, seen := state(ctx)
				if a == nil {
					return false, seen
				}
				updated = a
				if a.swa.Generation <= created.swa.Generation {
					return false, fmt.Sprintf("generation %d not advanced past %d", a.swa.Generation, created.swa.Generation)
				}
				return a.settledOn(5, stable)
			}, env.waitOpts(diag))
		t.Logf("5 pods Ready on the new template in %s (from kubectl apply)", time.Since(start).Round(time.Millisecond))

		if updated.newestHash() == created.newestHash() {
			t.Errorf("pod template hash %q unchanged: the new message did not roll the pods", updated.newestHash())
		}
		t.Logf("observedGeneration %d -> %d, pod template %s -> %s", created.swa.Status.ObservedGeneration,
			updated.swa.Status.ObservedGeneration, created.newestHash(), updated.newestHash())
		cms, err := configMapsWith(ctx, ns, updated.newestRS.Spec.Template.Spec, "Hello, updated message!")
		if err != nil || len(cms) == 0 {
			t.Fatalf("no ConfigMap mounted by the new pod template holds the updated message (err %v)\n%s", err, diag())
		}
		t.Logf("updated message served from ConfigMap %v", cms)
	}) {
		return
	}

	if !t.Run("c/delete-two-pods", func(t *testing.T) {
		before, seen := state(ctx)
		if before == nil {
			t.Fatal(seen)
		}
		if len(before.readyPods) < 2 {
			t.Fatalf("want 2 Ready pods to delete\n%s", before)
		}
		victims := podNames(before.readyPods)[:2]
		start := time.Now()
		if _, err := env.Kubectl.Admin(append([]string{"delete", "pod", "-n", ns, "--wait=false"}, victims...)...); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, timeout, fmt.Sprintf("pods %v replaced, 5 Ready and status readyReplicas=5 with Ready=True", victims),
			func(ctx context.Context) (bool, string) {
				a, seen := state(ctx)
				if a == nil {
					return false, seen
				}
				names := podNames(a.pods)
				for _, v := range victims {
					if slices.Contains(names, v) {
						return false, "deleted pod " + v + " still exists\n" + a.String()
					}
				}
				return a.settledOn(5, stable)
			}, env.waitOpts(diag))
		t.Logf("2 deleted pods replaced, 5 Ready again in %s", time.Since(start).Round(time.Millisecond))
	}) {
		return
	}

	t.Run("d/delete", func(t *testing.T) {
		start := time.Now()
		if _, err := env.Kubectl.Admin("delete", "swa", appName, "-n", ns); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, timeout, "every child of "+appName+" garbage-collected", func(ctx context.Context) (bool, string) {
			left, err := children(ctx, ns)
			if err != nil {
				return false, err.Error()
			}
			return len(left) == 0, "still there: " + names(left)
		}, env.waitOpts(diag))
		t.Logf("all children garbage-collected in %s (from kubectl delete)", time.Since(start).Round(time.Millisecond))
	})
}

// TestOperatorLeastPrivilege asks the API server what the operator's token
// may do: the operator's own resources, but no Secrets and no wildcard.
func TestOperatorLeastPrivilege(t *testing.T) {
	who, err := env.Kubectl.Run(env.operatorID.Kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if want := "system:serviceaccount:" + operatortest.Namespace + ":" + operatortest.ServiceAccount; err != nil || who != want {
		t.Fatalf("operator kubeconfig authenticates as %q (err %v), want %q", who, err, want)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", "simplewebapps.example.com", "--all-namespaces"}, "yes"},
		{[]string{"patch", "deployments.apps", "-n", "default"}, "yes"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"get", "secrets", "-n", operatortest.Namespace}, "no"},
		{[]string{"*", "*"}, "no"},
		{[]string{"*", "*", "--all-namespaces"}, "no"},
		{[]string{"create", "pods", "-n", "default"}, "no"},
		{[]string{"create", "clusterrolebindings"}, "no"},
	} {
		got, err := env.Kubectl.CanI(env.operatorID.Kubeconfig, c.args...)
		if err != nil || got != c.want {
			t.Errorf("kubectl auth can-i %s as the operator: %q (err %v), want %q", strings.Join(c.args, " "), got, err, c.want)
		}
	}
}

// e2eNS is every test's namespace: it enforces the restricted Pod Security
// Standard, as the user's namespace would, and is deleted after the test.
var e2eNS = testkit.NS{Prefix: "e2e-", PodSecurity: "restricted", WaitForServiceAccount: true}

// checkChildrenOwnedBy checks that the Deployment, Service and ConfigMaps of
// the app each have a controller reference to the SimpleWebApp.
func checkChildrenOwnedBy(t *testing.T, ctx context.Context, ns string, a *app) {
	t.Helper()
	objs, err := children(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Deployment", "Service", "ConfigMap"} {
		if len(objs[kind]) == 0 {
			t.Errorf("no %s labelled %s", kind, instance)
		}
		for _, o := range objs[kind] {
			ref := metav1.GetControllerOfNoCopy(o)
			if ref == nil || ref.UID != a.swa.UID || ref.Kind != "SimpleWebApp" {
				t.Errorf("%s %s: controller reference %+v, want SimpleWebApp %s (uid %s)", kind, o.GetName(), ref, appName, a.swa.UID)
			}
		}
	}
	t.Logf("children with a controller reference to the SimpleWebApp: %s", names(objs))
}

// checkAppliedByOperator checks that the operator wrote d: created it (an
// Update entry: the operator creates with a POST so that it never adopts an
// existing object) or server-side-applied it since.
func checkAppliedByOperator(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	for _, mf := range d.ManagedFields {
		if mf.Manager == "simplewebapp-operator" && mf.Subresource == "" {
			return
		}
	}
	var managers []string
	for _, mf := range d.ManagedFields {
		managers = append(managers, fmt.Sprintf("%s/%s", mf.Manager, mf.Operation))
	}
	t.Errorf("Deployment %s managers %v, want simplewebapp-operator", d.Name, managers)
}

// children lists every object of the app by kind: what the operator renders
// and what the Deployment controller creates from it, by the instance label.
func children(ctx context.Context, ns string) (map[string][]metav1.Object, error) {
	lists := map[string]client.ObjectList{
		"Deployment": &appsv1.DeploymentList{}, "ReplicaSet": &appsv1.ReplicaSetList{}, "Pod": &corev1.PodList{},
		"Service": &corev1.ServiceList{}, "ConfigMap": &corev1.ConfigMapList{},
	}
	objs := map[string][]metav1.Object{}
	for kind, l := range lists {
		if err := env.C.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/instance": appName}); err != nil {
			return nil, err
		}
		items, err := apimeta.ExtractList(l)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			o, err := apimeta.Accessor(item)
			if err != nil {
				return nil, err
			}
			objs[kind] = append(objs[kind], o)
		}
	}
	return objs, nil
}

// names renders objects by kind as "Kind: name name, ...".
func names(objs map[string][]metav1.Object) string {
	var parts []string
	for kind, list := range objs {
		var objNames []string
		for _, o := range list {
			objNames = append(objNames, o.GetName())
		}
		parts = append(parts, kind+": "+strings.Join(objNames, " "))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// appliedEvent looks, through `kubectl get events`, for an event with reason
// Applied reported by the operator about the SimpleWebApp with uid.
func appliedEvent(ns string, uid types.UID) (bool, string) {
	out, err := env.Kubectl.Admin("get", "events", "-n", ns, "-o", "json")
	if err != nil {
		return false, err.Error()
	}
	var events corev1.EventList
	if err := json.Unmarshal([]byte(out), &events); err != nil {
		return false, err.Error()
	}
	var seen []string
	for _, ev := range events.Items {
		reporter := ev.ReportingController
		if reporter == "" {
			reporter = ev.Source.Component
		}
		seen = append(seen, fmt.Sprintf("%s %s/%s by %q: %s", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, reporter, ev.Message))
		if ev.Reason == "Applied" && ev.InvolvedObject.Kind == "SimpleWebApp" && ev.InvolvedObject.Name == appName &&
			ev.InvolvedObject.UID == uid && reporter == "simplewebapp-operator" {
			return true, ev.Message
		}
	}
	return false, fmt.Sprintf("events: %v", seen)
}
