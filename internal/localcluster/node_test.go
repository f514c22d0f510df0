package localcluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestRealNode starts profile node with metrics, runs a pod on the real node,
// reaches it through a ClusterIP Service from the client netns, kills its
// container's process and sees kubelet restart it, checks that pods and the
// client reach the kube-apiserver through the "kubernetes" Service and that
// metrics-server reports the pod's CPU, then stops the cluster and compares
// the host with a snapshot taken before.
func TestRealNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestRealNode needs root (a real kubelet, containerd and kube-proxy); the project's CI runs as root")
	}
	ctx := t.Context()
	// The host to ourselves from the first snapshot to the last.
	unlock, err := localcluster.LockRealNode(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unlock(); err != nil {
			t.Error(err)
		}
	}()
	before := snapshotHost(t)

	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	c, err := localcluster.Start(startCtx, localcluster.Options{Profile: localcluster.ProfileNode, Metrics: true, LogWriter: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start (profile node, metrics): %s", time.Since(t0).Round(time.Millisecond))
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	if c.Node == nil {
		t.Fatal("Cluster.Node is nil: no real node started (see the log for why)")
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := testkit.Namespace(t, cl, testkit.NS{Prefix: "real-node-", WaitForServiceAccount: true})

	runRealNodeChecks(t, c, cs, ns)

	t1 := time.Now()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("Stop: %s", time.Since(t1).Round(time.Millisecond))
	if d := before.diff(snapshotHost(t)); len(d) > 0 {
		t.Errorf("the host differs after Stop from before Start:\n  %s", strings.Join(d, "\n  "))
	}
}

// runRealNodeChecks are TestRealNode's checks on the running cluster.
func runRealNodeChecks(t *testing.T, c *localcluster.Cluster, cs kubernetes.Interface, ns string) {
	ctx := t.Context()
	t0 := time.Now()
	pod := webPod(ns)
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitRunning(t, cs, ns, pod.Name, 0)
	t.Logf("pod created -> running on %s: %s", p.Spec.NodeName, time.Since(t0).Round(time.Millisecond))
	if p.Spec.NodeName != c.Node.Name {
		t.Fatalf("pod on node %q, want the real node %q", p.Spec.NodeName, c.Node.Name)
	}
	cid := p.Status.ContainerStatuses[0].ContainerID
	if !strings.HasPrefix(cid, "containerd://") {
		t.Fatalf("containerID %q, want containerd://...", cid)
	}

	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + svc.Spec.ClusterIP + "/"
	httpc := c.Node.HTTPClient(false)
	t1 := time.Now()
	waitBody(t, httpc, url, "hello real node")
	t.Logf("Service %s answers from the client netns after %s", url, time.Since(t1).Round(time.Millisecond))

	// The kubernetes Service leads to the kube-apiserver: from the client
	// netns, and from a pod (it prints the apiserver's answer to a plain
	// HTTP request on its TLS port).
	testkit.WaitFor(t, 30*time.Second, "TCP connect to 10.0.0.1:443 from the client netns", func(ctx context.Context) (bool, string) {
		conn, err := c.Node.DialContext(ctx, "tcp", "10.0.0.1:443")
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
	checkAPIFromPod(t, cs, ns)

	// kubelet restarts a container whose process dies.
	pid := containerPID(t, strings.TrimPrefix(cid, "containerd://"))
	t2 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, cs, ns, pod.Name, 1)
	waitBody(t, httpc, url, "hello real node")
	t.Logf("container process %d killed -> serving again: %s", pid, time.Since(t2).Round(time.Millisecond))

	checkPodMetrics(t, cs, httpc, ns, pod.Name, url)
}

func webPod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []corev1.Container{{
				Name: "web", Image: localcluster.RealNodeTestImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Args:  []string{"-message", "hello real node"},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
		},
	}
}

// waitRunning waits until the pod's container runs, ready, with at least
// restarts restarts.
func waitRunning(t *testing.T, cs kubernetes.Interface, ns, name string, restarts int32) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testkit.WaitFor(t, 2*time.Minute, fmt.Sprintf("pod %s running and ready, %d+ restarts", name, restarts), func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(p.Status.ContainerStatuses) == 0 {
			return false, "phase " + string(p.Status.Phase) + ", node " + p.Spec.NodeName
		}
		st := p.Status.ContainerStatuses[0]
		pod = p
		return st.State.Running != nil && st.Ready && st.RestartCount >= restarts,
			fmt.Sprintf("state %+v, ready %t, restarts %d", st.State, st.Ready, st.RestartCount)
	})
	return pod
}

// waitBody waits until a GET of url answers 200 with a body containing want.
func waitBody(t *testing.T, httpc *http.Client, url, want string) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, "GET "+url+" answers "+want, func(ctx context.Context) (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), want), resp.Status + ": " + string(b)
	})
}

// checkAPIFromPod runs a pod that sends a plain HTTP request to the
// "kubernetes" Service's ClusterIP and reads the kube-apiserver's answer
// from its log (through the kubelet API: kubectl logs works too).
func checkAPIFromPod(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "api-client", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "get", Image: localcluster.RealNodeTestImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Args: []string{"-get", "http://10.0.0.1:443/"},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "pod api-client got the kube-apiserver's answer via 10.0.0.1:443", func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			return false, "phase " + string(p.Status.Phase)
		}
		logs, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, "logs: " + err.Error()
		}
		return strings.Contains(string(logs), "HTTP request to an HTTPS server"), "log: " + string(logs)
	})
}

// containerPID is the host PID of a container's process, from its cgroup
// (kubelet's cgroupRoot /swa-real-node, the container ID as the leaf).
func containerPID(t *testing.T, id string) int {
	t.Helper()
	var pid int
	testkit.WaitFor(t, 10*time.Second, "container "+id+" in a cgroup", func(context.Context) (bool, string) {
		roots, _ := filepath.Glob("/sys/fs/cgroup/*/swa-real-node")
		roots = append(roots, "/sys/fs/cgroup/swa-real-node")
		for _, root := range roots {
			found := ""
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() && strings.Contains(d.Name(), id) {
					found = p
				}
				return nil
			})
			if b, err := os.ReadFile(filepath.Join(found, "cgroup.procs")); found != "" && err == nil {
				if _, err := fmt.Sscan(string(b), &pid); err == nil {
					return true, ""
				}
			}
		}
		return false, "no cgroup named after it with a process"
	})
	return pid
}

// checkPodMetrics waits until metrics-server reports the web pod's CPU, which
// it scrapes from the real kubelet, while requests keep the server busy.
func checkPodMetrics(t *testing.T, cs kubernetes.Interface, httpc *http.Client, ns, name, url string) {
	t.Helper()
	t0 := time.Now()
	var usage string
	testkit.WaitFor(t, 2*time.Minute, "metrics.k8s.io reports pod "+name+"'s CPU", func(ctx context.Context) (bool, string) {
		for range 50 {
			if resp, err := httpc.Get(url); err == nil {
				resp.Body.Close()
			}
		}
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces", ns, "pods", name).DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		var m struct {
			Containers []struct {
				Usage map[string]string `json:"usage"`
			} `json:"containers"`
		}
		if err := json.Unmarshal(raw, &m); err != nil || len(m.Containers) == 0 || m.Containers[0].Usage["cpu"] == "" {
			return false, string(raw)
		}
		usage = m.Containers[0].Usage["cpu"]
		return true, ""
	})
	t.Logf("pod CPU %s from the real kubelet, after %s", usage, time.Since(t0).Round(time.Millisecond))
}

// TestRealNodeFailedStartUndoesEverything makes Start fail half-way, with
// the control plane, the bridge and containerd up (an image archive that
// does not exist), and checks that the host is as before.
func TestRealNodeFailedStartUndoesEverything(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestRealNodeFailedStartUndoesEverything needs root; the project's CI runs as root")
	}
	unlock, err := localcluster.LockRealNode(t.Context(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unlock(); err != nil {
			t.Error(err)
		}
	}()
	before := snapshotHost(t)
	missing := filepath.Join(t.TempDir(), "missing.tar")
	// A failed Start keeps its directory for the logs: the test's own.
	c, err := localcluster.Start(t.Context(), localcluster.Options{Profile: localcluster.ProfileNode, NodeImages: []string{missing},
		Dir: t.TempDir(), LogWriter: os.Stderr})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start with a missing image archive succeeded")
	}
	if !strings.Contains(err.Error(), missing) || strings.Contains(err.Error(), "leftovers") {
		t.Errorf("Start error %v: want the missing archive named, and no leftovers", err)
	}
	if d := before.diff(snapshotHost(t)); len(d) > 0 {
		t.Errorf("the host differs after the failed Start from before:\n  %s", strings.Join(d, "\n  "))
	}
}
