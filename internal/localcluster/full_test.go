package localcluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/internal/testkit"
)

// TestDeploymentLifecycle proves that the controllers, the scheduler and kwok
// work together: a Deployment becomes Available, a deleted pod is replaced and
// deleting the Deployment garbage-collects its ReplicaSet and pods.
func TestDeploymentLifecycle(t *testing.T) {
	_, cs, cl := fullCluster(t)
	ctx := t.Context()
	ns := testkit.Namespace(t, cl, testkit.NS{Prefix: "proof-", WaitForServiceAccount: true})

	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "web", Image: "nginx"}}, // kwok pulls nothing
					// Hard spreading, so that the test can require one pod per node.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var pods []corev1.Pod
	testkit.WaitFor(t, 60*time.Second, "Deployment Available and rolled out with 3 Ready pods", func(ctx context.Context) (bool, string) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		available := false
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
				available = true
			}
		}
		rolledOut, seen := testkit.DeploymentRolledOut(d)
		pods = readyPods(ctx, t, cs, ns, "app=web")
		return available && rolledOut && len(pods) == 3, fmt.Sprintf("Available %t; %s; %d Ready pods", available, seen, len(pods))
	})
	nodes := map[string]bool{}
	for _, p := range pods {
		if !strings.HasPrefix(p.Spec.NodeName, "kwok-node-") {
			t.Errorf("pod %s on node %q, want a kwok node", p.Name, p.Spec.NodeName)
		}
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != 3 {
		t.Errorf("pods on nodes %v, want 3 different kwok nodes", nodes)
	}

	// A deleted pod is replaced by a new one (kwok's pod-delete stage makes
	// the deletion actually happen).
	victim := pods[0].Name
	before := map[string]bool{}
	for _, p := range pods {
		before[p.Name] = true
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "deleted pod replaced, 3 Ready again", func(ctx context.Context) (bool, string) {
		all, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		newPod := false
		for _, p := range all.Items {
			if p.Name == victim {
				return false, "pod " + victim + " not gone yet"
			}
			newPod = newPod || !before[p.Name]
		}
		ready := len(readyPods(ctx, t, cs, ns, "app=web"))
		return newPod && ready == 3, fmt.Sprintf("a new pod %t, %d Ready", newPod, ready)
	})

	// Deleting the Deployment: the garbage collector removes ReplicaSet and pods.
	if err := cs.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "ReplicaSet and pods garbage-collected", func(ctx context.Context) (bool, string) {
		rs, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ps, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(rs.Items) == 0 && len(ps.Items) == 0, fmt.Sprintf("%d ReplicaSets, %d pods", len(rs.Items), len(ps.Items))
	})
}

// readyPods lists the pods matching selector that are Running and Ready and
// not being deleted.
func readyPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, selector string) []corev1.Pod {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Logf("list pods: %v", err)
		return nil
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				out = append(out, p)
			}
		}
	}
	return out
}

// TestPodSecurityAdmission proves that Pod Security admission is enabled: a
// namespace enforcing "restricted" rejects a privileged pod and admits a
// compliant one.
func TestPodSecurityAdmission(t *testing.T) {
	_, cs, cl := fullCluster(t)
	ctx := t.Context()
	ns := testkit.Namespace(t, cl, testkit.NS{Prefix: "proof-", PodSecurity: "restricted", WaitForServiceAccount: true})

	privileged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "nginx",
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		}}},
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, privileged, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("privileged pod admitted in a restricted namespace")
	}
	if msg := err.Error(); !strings.Contains(msg, "PodSecurity") || !strings.Contains(msg, "privileged") {
		t.Fatalf("privileged pod rejected, but not by Pod Security: %v", err)
	}
	t.Logf("rejected as expected: %v", err)

	restricted := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: ns},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "c", Image: "nginx",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, restricted, metav1.CreateOptions{}); err != nil {
		t.Fatalf("restricted-compliant pod rejected: %v", err)
	}
	testkit.WaitFor(t, 60*time.Second, "restricted pod Ready", func(ctx context.Context) (bool, string) {
		ready := len(readyPods(ctx, t, cs, ns, ""))
		return ready == 1, fmt.Sprintf("%d Ready pods", ready)
	})
}

// Every kwok node keeps a Lease in kube-node-lease: without one the node
// lifecycle controller declares the nodes NotReady after its grace period and
// marks every pod Ready=False, which breaks any test running longer than that.
func TestNodesHeartbeatWithLeases(t *testing.T) {
	_, cs, _ := fullCluster(t)
	testkit.WaitFor(t, 30*time.Second, "a renewed Lease for each kwok node", func(ctx context.Context) (bool, string) {
		for i := range 3 {
			name := fmt.Sprintf("kwok-node-%d", i)
			lease, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, name, metav1.GetOptions{})
			if err != nil || lease.Spec.RenewTime == nil || time.Since(lease.Spec.RenewTime.Time) > 40*time.Second {
				return false, fmt.Sprintf("Lease %s: %v (err %v)", name, lease.Spec.RenewTime, err)
			}
		}
		return true, ""
	})
}
