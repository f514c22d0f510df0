package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/internal/operatortest"
)

// kubectlImage is the image of the chart's test Pod: kubectl as its
// entrypoint. The test kubelet runs the cluster's kubectl for it.
const kubectlImage = "registry.k8s.io/kubectl:"

// podRun is what the test kubelet did with one Pod.
type podRun struct {
	pod      string
	phase    corev1.PodPhase
	took     time.Duration
	failed   string // the container that failed, with its output
	commands []string
}

// testKubelet plays the kubelet for the chart's `helm test` Pods, which
// kwok's fake nodes only mark Running: it runs each container for real,
// init containers first and in order, the way a kubelet runs the kubectl
// image (the cluster's kubectl, the container's args, a token of the Pod's
// ServiceAccount bound to the Pod as the only credential), and writes the
// outcome into the Pod's status (Succeeded, or Failed at the first container
// that exits non-zero), which is what `helm test` waits for.
type testKubelet struct {
	e    *operatortest.Env
	ns   string
	stop context.CancelFunc
	done chan struct{}

	mu   sync.Mutex
	runs []podRun
	errs []error
}

func startTestKubelet(t *testing.T, e *operatortest.Env, ns string) *testKubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &testKubelet{e: e, ns: ns, stop: cancel, done: make(chan struct{})}
	go k.loop(ctx)
	t.Cleanup(k.Stop)
	return k
}

// Stop ends the loop and waits for it.
func (k *testKubelet) Stop() {
	k.stop()
	<-k.done
}

// Runs returns the Pods run so far and the errors met.
func (k *testKubelet) Runs() ([]podRun, []error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]podRun(nil), k.runs...), append([]error(nil), k.errs...)
}

func (k *testKubelet) loop(ctx context.Context) {
	defer close(k.done)
	handled := map[types.UID]bool{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pods, err := k.e.CS.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=simplewebapp-operator-test"})
		if err != nil {
			continue // the context ended, or a transient error: next tick
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			// kwok moves the Pod to Running first; from then on no kwok stage
			// touches it, so our status is the last word.
			if handled[p.UID] || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			handled[p.UID] = true
			run, err := k.run(ctx, p)
			k.mu.Lock()
			if err != nil {
				k.errs = append(k.errs, fmt.Errorf("pod %s: %w", p.Name, err))
			} else {
				k.runs = append(k.runs, run)
			}
			k.mu.Unlock()
		}
	}
}

func (k *testKubelet) run(ctx context.Context, p *corev1.Pod) (podRun, error) {
	t0 := time.Now()
	run := podRun{pod: p.Name, phase: corev1.PodSucceeded}
	tok, err := k.e.CS.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, p.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return run, err
	}
	kubeconfig, err := k.e.TokenKubeconfig("testpod-"+string(p.UID), tok.Status.Token)
	if err != nil {
		return run, err
	}
	// Helm creates the test's RoleBinding (a hook of lower weight) just
	// before the Pod, and the authorizer sees a new binding a moment later. A
	// real kubelet pulls the image and starts a sandbox first; this one
	// would run at once, so it waits until the binding counts.
	if err := k.e.Kubectl.WaitCanI(ctx, 30*time.Second, operatortest.CanIWant{
		Kubeconfig: kubeconfig, Args: []string{"list", "pods", "-n", p.Namespace}, Want: "yes"}); err != nil {
		return run, err
	}
	home, err := os.MkdirTemp(k.e.Dir, "testpod-home-")
	if err != nil {
		return run, err
	}
	status := p.Status.DeepCopy()
	status.InitContainerStatuses, status.ContainerStatuses = nil, nil
	exec1 := func(c corev1.Container) (int32, error) {
		if !strings.HasPrefix(c.Image, kubectlImage) || len(c.Command) > 0 {
			return 0, fmt.Errorf("container %s: image %s, command %q: this kubelet runs only %s* with its entrypoint", c.Name, c.Image, c.Command, kubectlImage)
		}
		run.commands = append(run.commands, "kubectl "+strings.Join(c.Args, " "))
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, k.e.Kubectl.Bin, c.Args...)
		cmd.Env = []string{"KUBECONFIG=" + kubeconfig, "HOME=" + home}
		for _, env := range c.Env {
			if env.Name != "HOME" {
				cmd.Env = append(cmd.Env, env.Name+"="+env.Value)
			}
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := int32(0)
		if err != nil {
			code = 1
			if ee, ok := err.(*exec.ExitError); ok {
				code = int32(ee.ExitCode()) //nolint:gosec // G115: an exit status, -1 to 255
			}
			run.failed = fmt.Sprintf("%s (exit %d): %s", c.Name, code, strings.TrimSpace(out.String()))
		}
		return code, nil
	}
	terminated := func(c corev1.Container, code int32) corev1.ContainerStatus {
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		now := metav1.Now()
		return corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: now, FinishedAt: now}}}
	}
	for i, group := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range group {
			if run.failed != "" {
				break // a failed init container: the others never start
			}
			code, err := exec1(c)
			if err != nil {
				return run, err
			}
			if i == 0 {
				status.InitContainerStatuses = append(status.InitContainerStatuses, terminated(c, code))
			} else {
				status.ContainerStatuses = append(status.ContainerStatuses, terminated(c, code))
			}
		}
	}
	if run.failed != "" {
		run.phase = corev1.PodFailed
		status.Message = run.failed
	}
	status.Phase = run.phase
	for i := range status.Conditions {
		if status.Conditions[i].Type == corev1.PodReady || status.Conditions[i].Type == corev1.ContainersReady {
			status.Conditions[i].Status = corev1.ConditionFalse
			status.Conditions[i].Reason = "PodCompleted"
		}
	}
	p = p.DeepCopy()
	p.Status = *status
	if _, err := k.e.CS.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return run, err
	}
	run.took = time.Since(t0)
	return run, nil
}
