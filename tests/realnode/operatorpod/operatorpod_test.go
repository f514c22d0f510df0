// Package operatorpod installs the operator as a user does, on a real node:
// `make image` builds the operator's image as an OCI archive, the local
// cluster's real node imports it (there is no registry), and `kubectl apply
// --server-side -f` of what `make build-installer` writes runs it as a pod
// under its own ServiceAccount and the generated role, with leader election.
// That pod then makes the user's sample serve its message from real pods.
package operatorpod

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
)

// What config/default installs, and the sample.
const (
	namespace      = "simplewebapp-system"
	deploymentName = "simplewebapp-controller-manager"
	serviceAccount = "simplewebapp-controller-manager"
	leaseName      = "simplewebapp-operator.example.com"
	appNamespace   = "default"
	message        = "Welcome to my awesome web app!"
	timeout        = 3 * time.Minute
)

// TestOperatorRunsAsAPod: the operator from its own image and install.yaml
// runs on the real node, takes the leader Lease, and reconciles the sample
// into pods that serve its message.
func TestOperatorRunsAsAPod(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	version := strings.TrimSpace(readFile(t, filepath.Join(root, "VERSION")))
	image := "simplewebapp-operator:" + version
	installYAML, opArchive, webArchive := filepath.Join(dir, "install.yaml"), filepath.Join(dir, "operator.oci.tar"), filepath.Join(dir, "web.oci.tar")
	t0 := time.Now()
	run(t, root, "make", "-s", "build-installer", "INSTALLER="+installYAML)
	run(t, root, "make", "-s", "image", "IMAGE_ARCHIVE="+opArchive)
	run(t, root, "go", "run", "./hack/image", "-web-standin", "-o", webArchive)
	t.Logf("install.yaml and the images built in %s", time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(readFile(t, installYAML), "image: "+image) {
		t.Fatalf("%s does not run image %s", installYAML, image)
	}

	t0 = time.Now()
	logw := io.Discard
	if testing.Verbose() {
		logw = os.Stderr
	}
	c, err := localcluster.Start(t.Context(), localcluster.Options{
		Profile: localcluster.ProfileNode, NodeImages: []string{opArchive, webArchive}, LogWriter: logw,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	if c.Node == nil {
		t.Fatal("the cluster has no real node: it needs root and the node's binaries (make tools)")
	}
	t.Logf("FIGURE realnode: cluster with a real node ready in %s", time.Since(t0).Round(time.Millisecond))
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		bin, err := localcluster.BinDir()
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	diag := testkit.Diag(func() string { return describe(cs) })

	applied := time.Now()
	kubectl("apply", "--server-side", "-f", installYAML)
	kubectl("wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=120s")
	var pods []corev1.Pod
	testkit.WaitFor(t, timeout, "the operator's Deployment available, every pod of it Ready", func(ctx context.Context) (bool, string) {
		d, err := cs.AppsV1().Deployments(namespace).Get(ctx, deploymentName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range list.Items {
			if podReady(p) {
				ready++
			}
		}
		pods = list.Items
		want := int(*d.Spec.Replicas)
		return want > 0 && int(d.Status.AvailableReplicas) == want && len(pods) == want && ready == want,
			fmt.Sprintf("Deployment available %d of %d, %d pods, %d Ready", d.Status.AvailableReplicas, want, len(pods), ready)
	}, diag)
	t.Logf("FIGURE realnode: kubectl apply of install.yaml to the operator's %d pods Ready: %s", len(pods), time.Since(applied).Round(time.Millisecond))
	for _, pod := range pods {
		checkOnRealNode(t, c.Node.Name, pod)
		if got := pod.Spec.Containers[0].Image; got != image {
			t.Errorf("the operator's pod %s runs image %q, want %q", pod.Name, got, image)
		}
		if pod.Spec.ServiceAccountName != serviceAccount {
			t.Errorf("the operator's pod %s runs as ServiceAccount %q, want %q", pod.Name, pod.Spec.ServiceAccountName, serviceAccount)
		}
	}
	var leader string
	testkit.WaitFor(t, timeout, "one of the operator's pods holding the leader Lease "+leaseName, func(ctx context.Context) (bool, string) {
		l, err := cs.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods {
			if leaseHeldBy(l, p.Name) {
				leader = p.Name
				return true, ""
			}
		}
		return false, fmt.Sprintf("holder %v", l.Spec.HolderIdentity)
	}, diag)
	t.Logf("leader: pod %s", leader)

	created := time.Now()
	kubectl("apply", "-n", appNamespace, "-f", filepath.Join(root, "config/samples/my-webapp.yaml"))
	kubectl("wait", "--for=condition=Ready", "swa/my-webapp", "-n", appNamespace, "--timeout=3m")
	var svc *corev1.Service
	testkit.WaitFor(t, timeout, "3 Ready pods of my-webapp on the real node, the message served through its Service", func(ctx context.Context) (bool, string) {
		pods, err := cs.CoreV1().Pods(appNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=my-webapp"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range pods.Items {
			if podReady(p) && p.DeletionTimestamp == nil {
				ready++
			}
		}
		if ready != 3 {
			return false, fmt.Sprintf("%d of %d pods Ready", ready, len(pods.Items))
		}
		for _, p := range pods.Items {
			checkOnRealNode(t, c.Node.Name, p)
		}
		if svc, err = cs.CoreV1().Services(appNamespace).Get(ctx, "my-webapp-web", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		body, err := get(ctx, c.Node.HTTPClient(false), "http://"+net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))+"/")
		return err == nil && strings.TrimSpace(body) == message, fmt.Sprintf("served %q %v", body, err)
	}, diag)
	t.Logf("FIGURE realnode: the operator pod made my-webapp serve its message %s after kubectl apply", time.Since(created).Round(time.Millisecond))
}

func leaseHeldBy(l *coordinationv1.Lease, pod string) bool {
	return l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, pod)
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkOnRealNode fails the test unless pod runs on node in containers of a
// real runtime (containerd's IDs, not kwok's).
func checkOnRealNode(t *testing.T, node string, pod corev1.Pod) {
	t.Helper()
	if pod.Spec.NodeName != node {
		t.Errorf("pod %s runs on node %q, not the real node %s", pod.Name, pod.Spec.NodeName, node)
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		t.Errorf("pod %s has no container status", pod.Name)
	}
	for _, c := range pod.Status.ContainerStatuses {
		if !strings.HasPrefix(c.ContainerID, "containerd://") {
			t.Errorf("pod %s container %s has ID %q, not containerd's", pod.Name, c.Name, c.ContainerID)
		}
	}
}

// get fetches url with c: one attempt, a new connection.
func get(ctx context.Context, c *http.Client, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return string(b), err
}

// describe is the pods, events, Deployments and the operator's log, for
// failures.
func describe(cs kubernetes.Interface) string {
	var b strings.Builder
	for _, ns := range []string{namespace, appNamespace} {
		pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(&b, "pods in %s: %v\n", ns, err)
			continue
		}
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s/%s node %q phase %s ready %t statuses %+v\n", ns, p.Name, p.Spec.NodeName, p.Status.Phase, podReady(p), p.Status.ContainerStatuses)
		}
		evs, _ := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if evs != nil {
			for _, e := range evs.Items {
				fmt.Fprintf(&b, "event %s/%s %s %s: %s\n", ns, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
			}
		}
	}
	if ds, err := cs.AppsV1().Deployments(namespace).List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, d := range ds.Items {
			fmt.Fprintf(&b, "deployment %s: %+v\n", d.Name, d.Status)
		}
	}
	if pods, err := cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			logs, err := cs.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](30)}).DoRaw(context.Background())
			fmt.Fprintf(&b, "--- log of %s (%v) ---\n%s\n", p.Name, err, logs)
		}
	}
	return b.String()
}

// run runs a command in dir, failing the test with its output on error.
func run(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
