package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// tenantImage is an image outside the operator's --allowed-images.
const tenantImage = "evil.example.com/miner:latest"

// A tenant who may only manage SimpleWebApps, in a namespace without Pod
// Security labels, gets nothing through the operator that they could not get
// alone (testkit.RefusedAttempts: host access, privilege, other tokens,
// exposure, labels that join other selectors, annotations other controllers
// act on, scheduling onto control-plane nodes or across namespaces, unbounded
// numbers, copy, alias, CEL and CPU bombs; and an image outside
// --allowed-images): each attempt is refused with its reason, and nothing of
// it ever exists in the cluster. The abusive SimpleWebApps do not slow the ordinary ones down
// (both times are logged), cost the operator under 1 s of CPU each, and the
// operator stays small and alive.
func TestTenantGetsNothingBeyondTheirRights(t *testing.T) {
	ctx := t.Context()
	ns := testkit.Namespace(t, env.C, testkit.NS{Prefix: "tenant-", WaitForServiceAccount: true}) // no Pod Security labels
	tenant := tenantClient(t, ctx, ns)
	if answer, _ := env.Kubectl.CanI(env.Kubectl.AdminKubeconfig, "create", "deployments", "-n", ns, "--as=system:serviceaccount:"+ns+":tenant"); answer != "no" {
		t.Fatalf("the tenant may create Deployments (%q): the test would prove nothing", answer)
	}

	// Baseline: 10 ordinary SimpleWebApps alone.
	cpu0 := operatorCPU(t)
	baseline := readyTime(t, ctx, tenant, ns, "calm", 10, nil)
	cpuCalm := operatorCPU(t) - cpu0
	t.Logf("10 ordinary SimpleWebApps Ready in %s without abusers (operator CPU %.2f s)", baseline.Round(time.Millisecond), cpuCalm)

	// The same next to every attempt. Pods are sampled all along.
	stop := make(chan struct{})
	violations := make(chan string, 100)
	go func() {
		for {
			select {
			case <-stop:
				close(violations)
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, v := range exposure(ctx, ns) {
				violations <- v
			}
		}
	}()
	attempts := testkit.RefusedAttempts()
	cpu1 := operatorCPU(t)
	withAbusers := readyTime(t, ctx, tenant, ns, "busy", 10, func() {
		for name, patches := range attempts {
			swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: webappv1.SimpleWebAppSpec{Replicas: new(int32(1)), Patches: patches}}
			if err := tenant.Create(ctx, swa); err != nil {
				t.Fatalf("tenant creating %s: %v", name, err)
			}
		}
		swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "image"},
			Spec: webappv1.SimpleWebAppSpec{Replicas: new(int32(1)), Image: tenantImage}}
		if err := tenant.Create(ctx, swa); err != nil {
			t.Fatalf("tenant creating image: %v", err)
		}
	})
	t.Logf("10 ordinary SimpleWebApps Ready in %s next to %d abusive ones", withAbusers.Round(time.Millisecond), len(attempts))

	want := map[string][]string{"image": {webappv1.ReasonImageNotAllowed}}
	for name := range attempts {
		want[name] = []string{webappv1.ReasonPatchNotAllowed, webappv1.ReasonPolicyViolation}
	}
	for name, reasons := range want {
		var took time.Duration
		testkit.WaitFor(t, timeout, name+" refused", func(ctx context.Context) (bool, string) {
			swa := &webappv1.SimpleWebApp{}
			if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
				return false, err.Error()
			}
			c := apimeta.FindStatusCondition(swa.Status.Conditions, webappv1.ConditionStalled)
			if c == nil || c.Status != metav1.ConditionTrue {
				return false, fmt.Sprintf("%+v", swa.Status.Conditions)
			}
			// When the operator refused it, at the API's second precision.
			took = c.LastTransitionTime.Sub(swa.CreationTimestamp.Time)
			return slices.Contains(reasons, c.Reason), c.Reason + ": " + c.Message
		})
		// Refused from its first generation: nothing of it was ever applied.
		for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
			if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-web"}, obj); !apierrors.IsNotFound(err) {
				t.Errorf("%s: %T %s-web: %v, want NotFound", name, obj, name, err)
			}
		}
		// Wall clock from creation includes the queue behind the ordinary
		// apps and the machine's load: logged, not judged.
		t.Logf("%s refused %s after its creation (second precision)", name, took)
	}
	// What the abusive ones cost the operator: its CPU time for the busy
	// round beyond the calm one (the same 10 ordinary apps). A patch that
	// made the render explode (the copy bomb, the CEL bomb) would cost
	// seconds to minutes each.
	cpuAbuse := operatorCPU(t) - cpu1 - cpuCalm
	t.Logf("operator CPU: %.2f s for the busy round, %.2f s beyond the calm one for %d abusive SimpleWebApps", cpuAbuse+cpuCalm, cpuAbuse, len(want))
	if limit := float64(len(want)); cpuAbuse > limit {
		t.Errorf("the %d abusive SimpleWebApps cost the operator %.2f CPU s, want under 1 s each", len(want), cpuAbuse)
	}
	close(stop)
	var seen []string
	for v := range violations {
		seen = append(seen, v)
	}
	if len(seen) > 0 {
		t.Errorf("host access, privilege or exposure existed: %v", seen)
	}
	if exited, err := env.op.Exited(); exited {
		t.Fatalf("the operator exited: %v", err)
	}
	peak := peakRSS(t, env.op.Pid())
	t.Logf("operator peak RSS %d MiB", peak>>20)
	if peak > 150<<20 {
		t.Errorf("operator peak RSS %d MiB, want under 150 MiB", peak>>20)
	}
}

// tenantClient makes the ServiceAccount "tenant" in ns with a Role on
// simplewebapps only, and returns a client with its token.
func tenantClient(t *testing.T, ctx context.Context, ns string) client.Client {
	t.Helper()
	id, err := env.NewServiceAccount(ctx, ns, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swa-only"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"example.com"}, Resources: []string{"simplewebapps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swa-only"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "swa-only"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "tenant"}}},
	} {
		if err := env.C.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", id.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = webappv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Kubectl.WaitCanI(ctx, 30*time.Second, operatortest.CanIWant{
		Kubeconfig: id.Kubeconfig, Args: []string{"create", "simplewebapps.example.com", "-n", ns}, Want: "yes",
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// readyTime creates n ordinary SimpleWebApps named prefix-i as the tenant,
// runs also (if any) right after, and returns how long until all are Ready.
func readyTime(t *testing.T, ctx context.Context, tenant client.Client, ns, prefix string, n int, also func()) time.Duration {
	t.Helper()
	start := time.Now()
	for i := range n {
		swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, i)},
			Spec: webappv1.SimpleWebAppSpec{Replicas: new(int32(1)), Message: "ordinary"}}
		if err := tenant.Create(ctx, swa); err != nil {
			t.Fatal(err)
		}
	}
	if also != nil {
		also()
	}
	testkit.WaitFor(t, timeout, fmt.Sprintf("%d %s SimpleWebApps Ready", n, prefix), func(ctx context.Context) (bool, string) {
		ready := 0
		for i := range n {
			swa := &webappv1.SimpleWebApp{}
			if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, i)}, swa); err == nil &&
				apimeta.IsStatusConditionTrue(swa.Status.Conditions, webappv1.ConditionReady) {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d Ready", ready, n)
	})
	return time.Since(start)
}

// exposure lists pods with host access or privilege, and Services that are
// not ClusterIP or have external IPs, in ns.
func exposure(ctx context.Context, ns string) []string {
	var out []string
	pods := &corev1.PodList{}
	if err := env.C.List(ctx, pods, client.InNamespace(ns)); err == nil {
		for _, p := range pods.Items {
			s := p.Spec
			if s.HostNetwork || s.HostPID || s.HostIPC || s.ServiceAccountName != "" && s.ServiceAccountName != "default" {
				out = append(out, "pod "+p.Name+": host namespaces or another service account")
			}
			for _, v := range s.Volumes {
				if v.HostPath != nil || v.Secret != nil || v.Projected != nil {
					out = append(out, "pod "+p.Name+": volume "+v.Name)
				}
			}
			for _, c := range s.Containers {
				if sc := c.SecurityContext; sc != nil && (sc.Privileged != nil && *sc.Privileged || sc.RunAsUser != nil && *sc.RunAsUser == 0) {
					out = append(out, "pod "+p.Name+": privileged container "+c.Name)
				}
			}
		}
	}
	svcs := &corev1.ServiceList{}
	if err := env.C.List(ctx, svcs, client.InNamespace(ns)); err == nil {
		for _, s := range svcs.Items {
			if s.Spec.Type != corev1.ServiceTypeClusterIP || len(s.Spec.ExternalIPs) > 0 {
				out = append(out, "service "+s.Name+": "+string(s.Spec.Type))
			}
		}
	}
	return out
}

// operatorCPU is the CPU seconds the operator process has used.
func operatorCPU(t *testing.T) float64 {
	t.Helper()
	s, err := localcluster.CPUSeconds(env.op.Pid())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// peakRSS is the process's peak resident set size (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
