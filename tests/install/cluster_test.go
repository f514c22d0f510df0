package install_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
)

// Generous: the machine has 2 cores and other test packages run alongside.
const podsTimeout = 3 * time.Minute

// TestKustomizeInstall server-side applies config/default to a full local
// cluster: first as a dry run (every object admitted, no Pod Security
// warning, nothing persisted), then for real with `make deploy`, run with
// nothing but a kubectl, go and bash on PATH. The operator's ReplicaSet
// then creates 2 pods in the restricted namespace (Pod Security admission
// admits them; kwok runs them without pulling the image), its metrics Service
// selects them, and its ServiceAccount has the permissions of the bound roles.
// A pod violating restricted is rejected in that namespace. `make undeploy`
// then removes it all.
func TestKustomizeInstall(t *testing.T) {
	c, cs, _ := fullCluster(t)
	objs := parse(t, kustomizeDefault(t, ""))
	ns := find(t, objs, "Namespace", namespace)
	const manager = "swa-install-test-kustomize"

	// A dry run cannot create the namespace that the other objects need: the
	// Namespace alone is applied for real first.
	if _, _, err := kubectl(t, c, toYAML(t, ns), "apply", "--server-side", "--field-manager="+manager, "-f", "-"); err != nil {
		t.Fatal(err)
	}
	dryRun(t, c, manager, objs)
	if _, err := cs.AppsV1().Deployments(namespace).Get(t.Context(), deploymentName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the dry run: Deployment %s: %v, want NotFound", deploymentName, err)
	}

	makeWithOnlyKubectl(t, c, "deploy")
	if _, _, err := kubectl(t, c, nil, "wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=120s"); err != nil {
		t.Fatal(err)
	}
	checkRunning(t, c, cs, namespace, deploymentName, serviceAccount, metricsService, managerRole)
	checkRestrictedEnforced(t, cs, namespace, deploymentName)

	// kubectl delete waits until each object is gone: the namespace (its pods
	// included) and the CRD.
	makeWithOnlyKubectl(t, c, "undeploy")
	for _, o := range objs {
		args := []string{"get", strings.ToLower(o.GetKind()), o.GetName(), "--ignore-not-found", "-o", "name"}
		if o.GetNamespace() != "" {
			args = append(args, "-n", o.GetNamespace())
		}
		if out, _, err := kubectl(t, c, nil, args...); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("after make undeploy: %s still there (%v)", key(o), err)
		}
	}
}

// makeWithOnlyKubectl runs `make target` against the cluster with a PATH that
// holds only kubectl (the cluster's, standing for the user's), go and bash:
// install targets need no tool of this project.
func makeWithOnlyKubectl(t *testing.T, c *localcluster.Cluster, target string) {
	t.Helper()
	pathDir := t.TempDir()
	links := map[string]string{"kubectl": tool(t, "kubectl")}
	for _, name := range []string{"go", "bash"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		links[name] = p
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(pathDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, makeBin, "--no-print-directory", target)
	cmd.Dir = repoRoot
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "SWA_BIN_DIR=") || strings.HasPrefix(kv, "KUBECTL=")
	}), "PATH="+pathDir, "KUBECONFIG="+c.Kubeconfig, "KUBECACHEDIR="+filepath.Join(tmpDir, "kubectl-cache"))
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s with PATH=%s (kubectl, go, bash): %v\n%s", target, pathDir, err, out)
	}
	t.Logf("FIGURE make %s with only kubectl, go and bash on PATH: %s\n%s", target, time.Since(t0).Round(time.Millisecond), out)
}

// TestHelmInstall does the same with the chart, as release "swa-helm" in a
// namespace of its own (the chart's names do not collide with config/default's).
func TestHelmInstall(t *testing.T) {
	c, cs, cl := fullCluster(t)
	const release, manager = "swa-helm", "swa-install-test-helm"
	// A namespace that enforces the restricted Pod Security Standard.
	ns := testkit.Namespace(t, cl, testkit.NS{Name: "swa-helm", PodSecurity: "restricted", Keep: true})
	objs := parse(t, helmTemplate(t, release, ns))
	dryRun(t, c, manager, objs)
	if _, err := cs.AppsV1().Deployments(ns).Get(t.Context(), release+"-controller-manager", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the dry run: Deployment %s: %v, want NotFound", release+"-controller-manager", err)
	}

	apply(t, c, manager, objs)
	checkRunning(t, c, cs, ns, release+"-controller-manager", release+"-controller-manager",
		release+"-controller-manager-metrics-service", release+"-manager-role")
	checkRestrictedEnforced(t, cs, ns, release+"-controller-manager")
}

// dryRun server-side applies objs with --dry-run=server: every object must be
// admitted (validation, admission, Pod Security) without any warning.
func dryRun(t *testing.T, c *localcluster.Cluster, manager string, objs []*unstructured.Unstructured) {
	t.Helper()
	t0 := time.Now()
	out, warnings, err := kubectl(t, c, toYAML(t, objs...), "apply", "--server-side", "--dry-run=server", "--field-manager="+manager, "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "(server dry run)"); n != len(objs) {
		t.Errorf("dry run: %d objects reported, want %d:\n%s", n, len(objs), out)
	}
	if strings.TrimSpace(warnings) != "" {
		t.Errorf("dry run warnings (PodSecurity, deprecations, unknown fields):\n%s", warnings)
	}
	t.Logf("server-side dry run of %d objects admitted in %s", len(objs), time.Since(t0).Round(time.Millisecond))
}

// apply server-side applies objs for real and waits for the CRD.
func apply(t *testing.T, c *localcluster.Cluster, manager string, objs []*unstructured.Unstructured) {
	t.Helper()
	out, warnings, err := kubectl(t, c, toYAML(t, objs...), "apply", "--server-side", "--field-manager="+manager, "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(warnings) != "" {
		t.Errorf("apply warnings:\n%s", warnings)
	}
	t.Logf("applied:\n%s", out)
	if _, _, err := kubectl(t, c, nil, "wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=120s"); err != nil {
		t.Fatal(err)
	}
}

// checkRunning waits until the operator Deployment is rolled out and its
// ReplicaSet has created its 2 pods and they run (Pod Security admitted them
// in the namespace), the
// metrics Service has them as endpoints, and the ServiceAccount may do what
// the operator does: the bindings name the prefixed ServiceAccount in the
// right namespace.
func checkRunning(t *testing.T, c *localcluster.Cluster, cs kubernetes.Interface, ns, deployName, sa, svc, clusterRole string) {
	t.Helper()
	ctx := t.Context()
	describeEvents := func() string {
		ev, _, _ := kubectl(t, c, nil, "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
		return "--- events ---\n" + ev
	}
	events := testkit.Diag(describeEvents)
	testkit.WaitFor(t, podsTimeout, fmt.Sprintf("Deployment %s/%s rolled out, its ReplicaSet running 2 pods", ns, deployName), func(ctx context.Context) (bool, string) {
		dep, err := cs.AppsV1().Deployments(ns).Get(ctx, deployName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		rolledOut, rollout := testkit.DeploymentRolledOut(dep)
		rs, err := replicaSetOf(ctx, cs, ns, dep)
		if err != nil || rs == nil {
			return false, fmt.Sprintf("no ReplicaSet yet (%v)", err)
		}
		failure := ""
		for _, cond := range rs.Status.Conditions {
			if cond.Type == appsv1.ReplicaSetReplicaFailure && cond.Status == corev1.ConditionTrue {
				if strings.Contains(cond.Message, "violates PodSecurity") { // no retry admits them
					t.Fatalf("ReplicaSet %s: %s: %s\n%s", rs.Name, cond.Reason, cond.Message, describeEvents())
				}
				failure = "; " + cond.Reason + ": " + cond.Message // maybe transient: the controller retries
			}
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		running, summary := 0, []string{}
		for _, p := range pods.Items {
			if !metav1.IsControlledBy(&p, rs) {
				continue
			}
			summary = append(summary, p.Name+"="+string(p.Status.Phase)+" on "+p.Spec.NodeName)
			if p.Status.Phase == corev1.PodRunning && p.Spec.ServiceAccountName == sa {
				running++
			}
		}
		return rolledOut && running == 2 && len(summary) == 2, fmt.Sprintf("%s; ReplicaSet %s: %d/%d pods created%s; pods: %v",
			rollout, rs.Name, rs.Status.Replicas, ptr.Deref(rs.Spec.Replicas, 1), failure, summary)
	}, testkit.Every(200*time.Millisecond), events)

	testkit.WaitFor(t, podsTimeout, fmt.Sprintf("metrics Service %s/%s with 2 ready endpoints on 8443", ns, svc), func(ctx context.Context) (bool, string) {
		slices, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return false, err.Error()
		}
		ready, port := 0, int32(0)
		for _, s := range slices.Items {
			for _, p := range s.Ports {
				port = ptr.Deref(p.Port, 0)
			}
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					ready++
				}
			}
		}
		return ready == 2 && port == 8443, fmt.Sprintf("%d EndpointSlices, %d ready endpoints, port %d", len(slices.Items), ready, port)
	}, testkit.Every(200*time.Millisecond), events)

	// The RBAC authorizer sees new bindings through an informer: wait.
	as := "--as=system:serviceaccount:" + ns + ":" + sa
	for _, check := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", "simplewebapps.example.com", "--all-namespaces"}, "yes"},
		{[]string{"patch", "simplewebapps.example.com", "--subresource=status", "-n", "default"}, "yes"},
		{[]string{"create", "deployments.apps", "-n", "default"}, "yes"},
		{[]string{"create", "tokenreviews.authentication.k8s.io"}, "yes"},        // secure metrics: authentication
		{[]string{"create", "subjectaccessreviews.authorization.k8s.io"}, "yes"}, // and authorization
		{[]string{"update", "leases.coordination.k8s.io", "-n", ns}, "yes"},      // leader election
		{[]string{"create", "events", "-n", ns}, "yes"},                          // its events (core v1)
		{[]string{"update", "leases.coordination.k8s.io", "-n", "default"}, "no"},
		{[]string{"get", "secrets", "-n", ns}, "no"},
		{[]string{"delete", "customresourcedefinitions.apiextensions.k8s.io"}, "no"},
	} {
		args := append([]string{"auth", "can-i", as}, check.args...)
		testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("can-i %s: %s", strings.Join(check.args, " "), check.want), func(context.Context) (bool, string) {
			out, _, _ := kubectl(t, c, nil, args...) // exit status 1 for "no"
			got := strings.TrimSpace(out)
			return got == check.want, "answer: " + got
		}, testkit.Every(200*time.Millisecond))
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, clusterRole, metav1.GetOptions{}); err != nil {
		t.Errorf("ClusterRole %s: %v", clusterRole, err)
	}
}

// replicaSetOf returns the newest ReplicaSet controlled by the Deployment.
func replicaSetOf(ctx context.Context, cs kubernetes.Interface, ns string, dep *appsv1.Deployment) (*appsv1.ReplicaSet, error) {
	list, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var newest *appsv1.ReplicaSet
	for i := range list.Items {
		rs := &list.Items[i]
		if metav1.IsControlledBy(rs, dep) && (newest == nil || rs.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = rs
		}
	}
	return newest, nil
}

// checkRestrictedEnforced: in the operator's namespace a pod made from the
// operator's own template is admitted (dry run), and each weakening of its
// security context is rejected by Pod Security admission.
func checkRestrictedEnforced(t *testing.T, cs kubernetes.Interface, ns, deployName string) {
	t.Helper()
	dep, err := cs.AppsV1().Deployments(ns).Get(t.Context(), deployName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.PodSpec)
		reject string // "" = admitted; else a part of the rejection message
	}{
		{"operator template", func(*corev1.PodSpec) {}, ""},
		{"privileged", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Privileged = ptr.To(true)
			s.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil // both together are invalid
		}, "privileged"},
		{"privilege escalation", func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil }, "allowPrivilegeEscalation"},
		{"capabilities kept", func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.Capabilities = nil }, "unrestricted capabilities"},
		{"may run as root", func(s *corev1.PodSpec) { s.SecurityContext.RunAsNonRoot = nil }, "runAsNonRoot"},
		{"no seccomp profile", func(s *corev1.PodSpec) { s.SecurityContext.SeccompProfile = nil }, "seccompProfile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := dep.Spec.Template.Spec.DeepCopy()
			tc.mutate(spec)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-check-", Namespace: ns}, Spec: *spec}
			_, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			psaRejected := apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity") && strings.Contains(err.Error(), tc.reject)
			switch {
			case tc.reject == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.reject != "" && err == nil:
				t.Errorf("admitted in %s, which enforces restricted", ns)
			case tc.reject != "" && !psaRejected:
				t.Errorf("error %v, want Forbidden: violates PodSecurity ... %s", err, tc.reject)
			}
		})
	}
}
