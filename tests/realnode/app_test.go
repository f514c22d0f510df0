package realnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// timeout bounds each wait for pods: a real container starts in seconds, a
// roll-out of five pods in well under a minute on a quiet machine.
const timeout = 3 * time.Minute

// newNamespace is a namespace for one test, enforcing the restricted Pod
// Security Standard (the package's pods meet it).
func newNamespace(t *testing.T) string {
	return testkit.Namespace(t, env.C, testkit.NS{Prefix: "realnode-", PodSecurity: "restricted", WaitForServiceAccount: true})
}

// waitOpts end a wait at once if the operator exits and show the namespace
// and the operator's log on failure.
func waitOpts(ns string) testkit.WaitOption {
	return testkit.Options(
		testkit.Every(200*time.Millisecond),
		testkit.Abort(func() error {
			if exited, err := env.op.Exited(); exited {
				return fmt.Errorf("the operator exited: %v", err)
			}
			return nil
		}),
		testkit.Diag(func() string {
			return fmt.Sprintf("--- operator log tail ---\n%s", env.op.LogTail(30))
		}),
		testkit.Diag(func() string { return describe(ns) }),
	)
}

// describe is the kubectl view of a namespace, for failures.
func describe(ns string) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "simplewebapps,deployments,replicasets,pods,services,endpointslices", "-n", ns, "-o", "wide"},
		{"get", "events", "-n", ns, "--sort-by=.lastTimestamp"},
	} {
		out, err := env.Kubectl.Admin(args...)
		fmt.Fprintf(&b, "--- kubectl %s ---\n%s%v\n", strings.Join(args, " "), out, err)
	}
	return b.String()
}

// createApp creates a SimpleWebApp.
func createApp(t *testing.T, ns, name string, spec webappv1.SimpleWebAppSpec) *webappv1.SimpleWebApp {
	t.Helper()
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := env.C.Create(t.Context(), swa); err != nil {
		t.Fatalf("creating SimpleWebApp %s/%s: %v", ns, name, err)
	}
	return swa
}

// patchApp merge-patches a SimpleWebApp's spec.
func patchApp(t *testing.T, ns, name, patch string) {
	t.Helper()
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.C.Patch(t.Context(), swa, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatalf("patching SimpleWebApp %s/%s with %s: %v", ns, name, patch, err)
	}
}

// app is one observation of a SimpleWebApp, its Deployment and pods.
type app struct {
	swa  webappv1.SimpleWebApp
	dep  appsv1.Deployment
	svc  corev1.Service
	pods []corev1.Pod // every pod of the app, terminating ones too
}

func observe(ctx context.Context, ns, name string) (*app, error) {
	a := &app{}
	key := client.ObjectKey{Namespace: ns, Name: name}
	child := client.ObjectKey{Namespace: ns, Name: name + "-web"} // the package's objects are named <app>-web
	if err := env.C.Get(ctx, key, &a.swa); err != nil {
		return nil, err
	}
	if err := env.C.Get(ctx, child, &a.dep); err != nil {
		return nil, err
	}
	if err := env.C.Get(ctx, child, &a.svc); err != nil {
		return nil, err
	}
	var pods corev1.PodList
	if err := env.C.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/instance": name}); err != nil {
		return nil, err
	}
	a.pods = pods.Items
	return a, nil
}

// readyPods are the pods that are Ready and not terminating.
func (a *app) readyPods() []corev1.Pod {
	var out []corev1.Pod
	for _, p := range a.pods {
		if p.DeletionTimestamp == nil && podReady(p) {
			out = append(out, p)
		}
	}
	return out
}

// settled says whether the app runs exactly n Ready pods of the Deployment's
// current template, and the SimpleWebApp says Ready for its generation.
func (a *app) settled(n int) (bool, string) {
	ready := apimeta.FindStatusCondition(a.swa.Status.Conditions, webappv1.ConditionReady)
	d := a.dep.Status
	seen := fmt.Sprintf("SimpleWebApp generation %d observed %d Ready=%v; Deployment generation %d observed %d updated %d ready %d available %d replicas %d; %d pods (%d Ready)",
		a.swa.Generation, a.swa.Status.ObservedGeneration, ready != nil && ready.Status == metav1.ConditionTrue,
		a.dep.Generation, d.ObservedGeneration, d.UpdatedReplicas, d.ReadyReplicas, d.AvailableReplicas, d.Replicas, len(a.pods), len(a.readyPods()))
	done := a.swa.Status.ObservedGeneration == a.swa.Generation && ready != nil && ready.Status == metav1.ConditionTrue &&
		d.ObservedGeneration == a.dep.Generation && int(d.UpdatedReplicas) == n && int(d.AvailableReplicas) == n &&
		int(d.Replicas) == n && len(a.pods) == n && len(a.readyPods()) == n
	return done, seen
}

// waitSettled waits until the app runs n Ready pods of its current template
// and says so, and returns that observation.
func waitSettled(t *testing.T, ns, name string, n int) *app {
	t.Helper()
	var a *app
	testkit.WaitFor(t, timeout, fmt.Sprintf("%s/%s: %d Ready pods of the current template, status Ready", ns, name, n), func(ctx context.Context) (bool, string) {
		var err error
		if a, err = observe(ctx, ns, name); err != nil {
			return false, err.Error()
		}
		return a.settled(n)
	}, waitOpts(ns))
	checkOnRealNode(t, a.pods)
	return a
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkOnRealNode fails the test unless every pod runs on the real node in
// containers of a real runtime (containerd's IDs, not kwok's).
func checkOnRealNode(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	if len(pods) == 0 {
		t.Fatal("no pods to check")
	}
	for _, p := range pods {
		if p.Spec.NodeName != env.node.Name {
			t.Errorf("pod %s runs on node %q, not the real node %s", p.Name, p.Spec.NodeName, env.node.Name)
		}
		for _, c := range p.Status.ContainerStatuses {
			if !strings.HasPrefix(c.ContainerID, "containerd://") {
				t.Errorf("pod %s container %s has ID %q, not containerd's", p.Name, c.Name, c.ContainerID)
			}
		}
		if len(p.Status.ContainerStatuses) == 0 {
			t.Errorf("pod %s has no container status", p.Name)
		}
	}
}

// get fetches url from the harness's network namespace: one attempt, no
// retries, a new connection.
func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := env.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// serviceURL is the app's Service on its ClusterIP.
func (a *app) serviceURL() string {
	return "http://" + net.JoinHostPort(a.svc.Spec.ClusterIP, strconv.Itoa(int(a.svc.Spec.Ports[0].Port))) + "/"
}

// podURL is a pod's web server, on the pod IP.
func podURL(p corev1.Pod) string { return "http://" + net.JoinHostPort(p.Status.PodIP, "8080") + "/" }

// everyPodServes says whether each Ready pod of a serves want over HTTP, and
// what each served.
func everyPodServes(ctx context.Context, a *app, want string) (bool, string) {
	pods := a.readyPods()
	if len(pods) == 0 {
		return false, "no Ready pod"
	}
	ok := true
	var seen []string
	for _, p := range pods {
		body, err := get(ctx, podURL(p))
		if err != nil || strings.TrimSpace(body) != want {
			ok = false
		}
		seen = append(seen, fmt.Sprintf("%s (%s): %q %v", p.Name, p.Status.PodIP, strings.TrimSpace(body), err))
	}
	return ok, strings.Join(seen, "; ")
}

// containerPIDs are the host PIDs of a container's processes, read from its
// cgroup (kubelet names a container's cgroup by its ID, under the node's
// cgroup root).
func containerPIDs(containerID string) ([]int, error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	var found []int
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + env.node.CgroupRoot())
	roots = append(roots, "/sys/fs/cgroup/"+env.node.CgroupRoot())
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() || filepath.Base(path) != id {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					found = append(found, pid)
				}
			}
			return filepath.SkipAll
		})
		if err != nil {
			return nil, err
		}
		if len(found) > 0 {
			return found, nil
		}
	}
	return nil, fmt.Errorf("no cgroup with processes for container %s under %v", id, roots)
}

// kill SIGKILLs pids.
func kill(pids []int) error {
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			return err
		}
	}
	return nil
}

func trim(s string) string { return strings.TrimSpace(s) }
