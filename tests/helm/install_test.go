package helm_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestInstallAndHelmTest on the full local cluster: a bad value makes
// `helm install` fail with no release and no object of the templates; then `helm install` installs
// the CRD and the operator into a namespace enforcing the restricted Pod
// Security Standard (--wait: the Deployment's pods are admitted and
// Ready); the operator, run with the installed ServiceAccount's token and
// the Deployment's args, makes a SimpleWebApp Ready; `helm test` passes;
// and once the operator has no Ready pod, `helm test` fails.
func TestInstallAndHelmTest(t *testing.T) {
	e := clusterEnv(t)
	const release = "swa"
	ns := testkit.Namespace(t, e.C, testkit.NS{Name: "swa-helm", PodSecurity: "restricted", WaitForServiceAccount: true, Keep: true})
	apps := testkit.Namespace(t, e.C, testkit.NS{Name: "apps", WaitForServiceAccount: true, Keep: true})
	kc := e.Cluster.Kubeconfig

	_, _, err := runHelm(t, kc, "install", release, chartDir, "-n", ns, "--set", "replicaCount=two")
	if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
		t.Fatalf("helm install with replicaCount=two: %v, want the schema's rejection", err)
	}
	if out, _, err := runHelm(t, kc, "list", "-n", ns, "-a", "-q"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("after the rejected install: releases %q (%v), want none", out, err)
	}
	// Nothing of the chart's templates was applied. (Helm installs crds/
	// before it validates the values, so the CRD may exist by now.)
	if out, err := e.Kubectl.Admin("get", "deployments,serviceaccounts,roles", "-n", ns, "-l", "app.kubernetes.io/instance="+release, "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("after the rejected install: %q (%v), want nothing", out, err)
	}

	t0 := time.Now()
	out, _, err := runHelm(t, kc, "install", release, chartDir, "-n", ns, "--wait", "--timeout=3m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE helm install --wait: %s", time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(out, "helm test "+release+" -n "+ns) || strings.Contains(out, "config/") {
		t.Errorf("NOTES: want a `helm test` line and no repository path:\n%s", out)
	}
	if _, err := e.Kubectl.Admin("wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}

	runInstalledOperator(t, e, ns, release+"-controller-manager", apps, 2, "installed with Helm", "the Helm-installed identity")

	kubelet := startTestKubelet(t, e, ns)
	t0 = time.Now()
	if out, _, err := runHelm(t, kc, "test", release, "-n", ns, "--timeout=3m"); err != nil {
		runs, errs := kubelet.Runs()
		t.Fatalf("helm test: %v\nruns: %+v\nerrors: %v", err, runs, errs)
	} else if !strings.Contains(out, "Succeeded") {
		t.Errorf("helm test output without Succeeded:\n%s", out)
	}
	t.Logf("FIGURE helm test (passing): %s", time.Since(t0).Round(time.Millisecond))
	runs, errs := kubelet.Runs()
	if len(errs) > 0 || len(runs) != 1 || runs[0].phase != "Succeeded" || len(runs[0].commands) != 2 {
		t.Fatalf("test kubelet: runs %+v, errors %v; want one Pod run, both containers succeeded", runs, errs)
	}
	t.Logf("the test Pod ran %q in %s", runs[0].commands, runs[0].took.Round(time.Millisecond))

	// No Ready operator pod: the test must fail, at the readiness check.
	if _, err := e.Kubectl.Admin("-n", ns, "scale", "deployment/"+release+"-controller-manager", "--replicas=0"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, "no operator pod left", func(ctx context.Context) (bool, string) {
		pods, err := e.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	}, testkit.Every(200*time.Millisecond))
	if _, _, err := runHelm(t, kc, "test", release, "-n", ns, "--timeout=3m"); err == nil {
		t.Fatal("helm test passed with no operator pod")
	}
	runs, errs = kubelet.Runs()
	if len(errs) > 0 || len(runs) != 2 || runs[1].phase != "Failed" || !strings.HasPrefix(runs[1].failed, "operator-ready") {
		t.Fatalf("test kubelet: runs %+v, errors %v; want the second run to fail at operator-ready", runs, errs)
	}
	t.Logf("with no operator pod the test Pod failed: %s", runs[1].failed)
}

// TestInstallAsSubchart on the full local cluster: the umbrella chart of
// TestSubchart, with `global` values, installs (--wait) with this chart as
// its dependency, using a ServiceAccount made beforehand
// (serviceAccount.create=false): the release creates none, binds the
// operator's roles to that one, and the operator, run with its token and
// the Deployment's args, makes a SimpleWebApp Ready.
func TestInstallAsSubchart(t *testing.T) {
	e := clusterEnv(t)
	ctx := t.Context()
	const release, sa = "platform", "platform-operator"
	ns := testkit.Namespace(t, e.C, testkit.NS{Name: "swa-umbrella", PodSecurity: "restricted", WaitForServiceAccount: true, Keep: true})
	apps := testkit.Namespace(t, e.C, testkit.NS{Name: "apps-umbrella", WaitForServiceAccount: true, Keep: true})
	if err := e.C.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	// umbrellaValues ends in the simplewebapp-operator block: this line joins it.
	dir := umbrella(t, umbrellaValues+"  serviceAccount: {create: false, name: "+sa+"}\n")

	t0 := time.Now()
	if _, _, err := runHelm(t, e.Cluster.Kubeconfig, "install", release, dir, "-n", ns, "--wait", "--timeout=3m", "--set", "global.extra=x"); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE helm install --wait (umbrella): %s", time.Since(t0).Round(time.Millisecond))
	dep, err := e.CS.AppsV1().Deployments(ns).Get(ctx, release+"-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := readChartMeta(t).AppVersion; dep.Spec.Template.Spec.ServiceAccountName != sa || dep.Labels["app.kubernetes.io/version"] != v || ptr.Deref(dep.Spec.Replicas, -1) != 1 {
		t.Errorf("Deployment: serviceAccountName %q, labels %v, replicas %d; want %s, version %s, 1",
			dep.Spec.Template.Spec.ServiceAccountName, dep.Labels, ptr.Deref(dep.Spec.Replicas, -1), sa, v)
	}
	if out, err := e.Kubectl.Admin("get", "serviceaccounts", "-n", ns, "-l", "app.kubernetes.io/instance="+release, "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("ServiceAccounts of the release: %q (%v), want none", out, err)
	}
	crb, err := e.CS.RbacV1().ClusterRoleBindings().Get(ctx, release+"-manager-rolebinding", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}; !reflect.DeepEqual(crb.Subjects, want) {
		t.Errorf("ClusterRoleBinding %s subjects %+v, want %+v", crb.Name, crb.Subjects, want)
	}

	runInstalledOperator(t, e, ns, dep.Name, apps, 1, "installed as a subchart", "the existing ServiceAccount")
}

// runInstalledOperator runs the operator of the installed Deployment in ns
// with its ServiceAccount's token and waits until a SimpleWebApp it is given
// in apps is Ready: the install's identity and roles are enough.
func runInstalledOperator(t *testing.T, e *operatortest.Env, ns, deployment, apps string, replicas int32, message, identity string) {
	t.Helper()
	ctx := t.Context()
	op, err := e.StartInstalled(ctx, ns, deployment)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Kill)
	opDiag := testkit.Diag(func() string { return "--- operator log ---\n" + op.LogTail(30) })
	if err := op.WaitReady(ctx, 60*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, op.LogTail(30))
	}
	t.Logf("operator args: %q", op.Args())
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "my-webapp", Namespace: apps},
		Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To(replicas), Message: message}}
	if err := e.C.Create(ctx, swa); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "SimpleWebApp "+apps+"/my-webapp Ready under "+identity, func(ctx context.Context) (bool, string) {
		if err := e.C.Get(ctx, client.ObjectKeyFromObject(swa), swa); err != nil {
			return false, err.Error()
		}
		return apimeta.IsStatusConditionTrue(swa.Status.Conditions, "Ready"), fmt.Sprintf("%+v", swa.Status.Conditions)
	}, opDiag, testkit.Every(200*time.Millisecond))
}
