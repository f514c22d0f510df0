package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// waitOpts are the options of every wait here: it ends at once if the
// operator exits, and a failure shows the operator's log tail and diag.
func (e *testEnv) waitOpts(diag func() string) testkit.WaitOption {
	return testkit.Options(
		testkit.Every(100*time.Millisecond),
		testkit.Abort(func() error {
			if exited, err := e.op.Exited(); exited {
				return fmt.Errorf("the operator exited: %v", err)
			}
			return nil
		}),
		testkit.Diag(func() string {
			return fmt.Sprintf("--- operator log tail (%s) ---\n%s", e.op.LogPath(), e.op.LogTail(40))
		}),
		testkit.Diag(diag),
	)
}

// describeNamespace is the kubectl view of the app in ns, for failures.
func describeNamespace(ns string) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "simplewebapps,deployments,replicasets,pods,services,configmaps,poddisruptionbudgets", "-n", ns, "-o", "wide", "--show-labels"},
		{"get", "simplewebapps", "-n", ns, "-o", "yaml"},
		{"get", "events", "-n", ns},
	} {
		out, err := env.Kubectl.Admin(args...)
		fmt.Fprintf(&b, "--- kubectl %s ---\n%s", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "%v\n", err)
		}
	}
	return b.String()
}

// app is one observation of a SimpleWebApp and its workload.
type app struct {
	swa       webappv1.SimpleWebApp
	dep       appsv1.Deployment
	newestRS  *appsv1.ReplicaSet // the ReplicaSet of the Deployment's current revision
	pods      []corev1.Pod       // every pod the Deployment selects, terminating ones too
	readyPods []corev1.Pod       // Running, Ready and not terminating
}

// observe reads the SimpleWebApp name in ns, its Deployment depName, that
// Deployment's ReplicaSets and pods.
func observe(ctx context.Context, ns, name, depName string) (*app, error) {
	a := &app{}
	if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &a.swa); err != nil {
		return nil, err
	}
	if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: depName}, &a.dep); err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(a.dep.Spec.Selector)
	if err != nil {
		return nil, err
	}
	var rss appsv1.ReplicaSetList
	if err := env.C.List(ctx, &rss, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	revision := a.dep.Annotations["deployment.kubernetes.io/revision"]
	for i, rs := range rss.Items {
		if metav1.IsControlledBy(&rs, &a.dep) && revision != "" && rs.Annotations["deployment.kubernetes.io/revision"] == revision {
			a.newestRS = &rss.Items[i]
		}
	}
	var pods corev1.PodList
	if err := env.C.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	a.pods = pods.Items
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			a.readyPods = append(a.readyPods, p)
		}
	}
	return a, nil
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// newestHash is the pod-template-hash of the current ReplicaSet, or "".
func (a *app) newestHash() string {
	if a.newestRS == nil {
		return ""
	}
	return a.newestRS.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
}

// settledOn is the end state of a rollout of version to n replicas: the
// operator applied the current generation as version and reports Ready with n
// ready pods, and the workload is rolled out (rolledOut). Otherwise it says
// what is missing.
func (a *app) settledOn(n int32, version string) (bool, string) {
	st := a.swa.Status
	ready := apimeta.FindStatusCondition(st.Conditions, webappv1.ConditionReady)
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(st.ObservedGeneration == a.swa.Generation, "status.observedGeneration %d != generation %d", st.ObservedGeneration, a.swa.Generation)
	check(ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == a.swa.Generation,
		"condition Ready is not True for generation %d: %+v", a.swa.Generation, ready)
	check(st.ReadyReplicas == n && st.Replicas == n, "status replicas/readyReplicas %d/%d, want %d", st.Replicas, st.ReadyReplicas, n)
	check(st.Version == version, "status.version %q, want %s", st.Version, version)
	problems = append(problems, a.rolledOut(n)...)
	if len(problems) > 0 {
		return false, strings.Join(problems, "; ") + "\n" + a.String()
	}
	return true, a.String()
}

// rolledOut lists what keeps the workload from being rolled out to n
// replicas: the Deployment is rolled out (testkit.DeploymentRolledOut) to n
// replicas, and exactly n pods exist, all Ready and all from the newest
// ReplicaSet.
func (a *app) rolledOut(n int32) []string {
	hash := a.newestHash()
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	done, seen := testkit.DeploymentRolledOut(&a.dep)
	check(done && ptr.Deref(a.dep.Spec.Replicas, 1) == n, "%s; want rolled out to %d", seen, n)
	check(hash != "", "no ReplicaSet for the Deployment's revision %q", a.dep.Annotations["deployment.kubernetes.io/revision"])
	check(len(a.pods) == int(n) && len(a.readyPods) == int(n), "%d pods, %d Ready, want %d", len(a.pods), len(a.readyPods), n)
	for _, p := range a.pods {
		check(p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == hash, "pod %s has template hash %q, newest is %q",
			p.Name, p.Labels[appsv1.DefaultDeploymentUniqueLabelKey], hash)
	}
	return problems
}

func (a *app) String() string {
	ready := apimeta.FindStatusCondition(a.swa.Status.Conditions, webappv1.ConditionReady)
	var b strings.Builder
	fmt.Fprintf(&b, "SimpleWebApp generation %d status %+v Ready=%+v\n", a.swa.Generation, a.swa.Status, ready)
	fmt.Fprintf(&b, "pods (newest template hash %q):", a.newestHash())
	for _, p := range a.pods {
		fmt.Fprintf(&b, " %s[%s %s ready=%t terminating=%t]", p.Name, p.Labels[appsv1.DefaultDeploymentUniqueLabelKey],
			p.Status.Phase, podReady(p), p.DeletionTimestamp != nil)
	}
	return b.String()
}

// podNames lists the names of pods, sorted.
func podNames(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// configMapsWith returns the ConfigMaps mounted by a pod template that hold
// text in one of their values.
func configMapsWith(ctx context.Context, ns string, spec corev1.PodSpec, text string) ([]string, error) {
	var found []string
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		var cm corev1.ConfigMap
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: v.ConfigMap.Name}, &cm); err != nil {
			return nil, err
		}
		for _, val := range cm.Data {
			if strings.Contains(val, text) {
				found = append(found, cm.Name)
				break
			}
		}
	}
	return found, nil
}
