// Package e2e runs the user's scenario end to end: the operator binary, started
// as its own process and authenticated as its own ServiceAccount bound only to
// the generated ClusterRole, against a full local cluster (etcd,
// kube-apiserver, controller-manager, scheduler and kwok nodes). The operator
// also reads channels from a directory the tests write at run time
// (upgrade_test.go: upgrades, rollbacks, pinning, malformed channels).
package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/tests/cluster"
	"example.com/simplewebapp-operator/tests/operatortest"
)

const (
	// channelsPollInterval is the operator's --channels-poll-interval: it acts
	// on a change of --channels-dir once the content has stayed the same for
	// one more interval.
	channelsPollInterval = 500 * time.Millisecond

	// neverReadyLabel on a pod makes kwok run it without ever making it Ready
	// (neverReadyStage): a test package puts it on its pod template to play a
	// broken version.
	neverReadyLabel = "e2e.simplewebapp.example.com/never-ready"
)

// neverReadyStage is a kwok Stage, added to the standard ones, that moves a
// Pending pod carrying neverReadyLabel to Running with Ready=False and keeps it
// there: no other pod stage matches a Running, non-terminating pod outside a
// Job, and pod-delete still removes it once it is deleted.
//
// Such a pod also matches the standard pod-ready stage. kwok (v0.8.0,
// pkg/utils/lifecycle/lifecycle.go, Lifecycle.Match) picks among the matching
// stages at random when all their weights are 0 (the default), but once the
// weights of the matches add up to more than 0 it draws only among the stages
// whose weight is above 0. With weight 1 here and pod-ready at 0, this stage
// always wins for labelled pods, and pod-ready keeps every other pod.
const neverReadyStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: e2e-pod-running-never-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchLabels:
      ` + neverReadyLabel + `: "true"
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Pending'
  weight: 1
  next:
    statusTemplate: |
      {{ $now := Now }}

      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: ContainersNotReady
        message: "e2e: this pod never becomes ready"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: ContainersNotReady
        type: ContainersReady

      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ $hostIPs := NodeIPsWith .spec.nodeName }}
      {{ with $hostIPs }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      {{ with $podIPs }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
`

// env is the shared cluster and operator, set up by TestMain.
var env *testEnv

type testEnv struct {
	*operatortest.Env
	channelsDir string // the operator's --channels-dir, empty at start
	stagingDir  string // where files for channelsDir are written before a rename into it
	operatorID  *operatortest.Identity
	op          *operatortest.Operator
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	var cleanups operatortest.Cleanups
	defer cleanups.Run()
	e, err := setUp(cleanups.Add)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup failed:", err)
		if e != nil && e.op != nil {
			fmt.Fprintf(os.Stderr, "--- operator log tail ---\n%s\n", e.op.LogTail(50))
		}
		return 1
	}
	env = e
	code = m.Run()
	if code != 0 {
		keepOperatorLog(e.op)
	}
	return code
}

// keepOperatorLog copies the operator's log out of the run's temp dir, which
// is removed at the end, so a failure can be looked at afterwards.
func keepOperatorLog(op *operatortest.Operator) {
	b, err := os.ReadFile(op.LogPath())
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeping the operator log:", err)
		return
	}
	f, err := os.CreateTemp("", "swa-e2e-operator-*.log")
	if err == nil {
		_, err = f.Write(b)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeping the operator log:", err)
		return
	}
	fmt.Fprintf(os.Stderr, "the operator's log is kept in %s\n", f.Name())
}

// setUp starts the cluster, installs the CRD and the operator's RBAC, and
// starts the operator with a token of its ServiceAccount. Everything it starts
// is stopped by the functions it passes to cleanup.
func setUp(cleanup func(func())) (*testEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	oe, err := operatortest.Setup(ctx, operatortest.Options{Name: "e2e", ExtraKwokStages: []string{neverReadyStage}}, cleanup)
	if err != nil {
		return nil, err
	}
	e := &testEnv{
		Env: oe,
		// Empty: the embedded channels apply until a test writes here.
		channelsDir: filepath.Join(oe.Dir, "channels"),
		// A sibling on the same file system, so a rename into channelsDir is atomic.
		stagingDir: filepath.Join(oe.Dir, "channels-staging"),
	}
	for _, d := range []string{e.channelsDir, e.stagingDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}

	t0 := time.Now()
	if err := e.waitGarbageCollectorWatchesCRD(ctx); err != nil {
		return nil, err
	}
	e.Step(t0, "garbage collector collects dependents of SimpleWebApps")

	// The operator's namespace and ServiceAccount, bound to the generated
	// ClusterRole only.
	t0 = time.Now()
	if e.operatorID, err = e.SetUpOperatorIdentity(ctx, operatortest.OperatorRBAC{ClusterRoleBinding: "e2e-manager-rolebinding"}); err != nil {
		return nil, err
	}
	if err := e.Kubectl.WaitCanI(ctx, 30*time.Second, operatortest.CanIWant{
		Kubeconfig: e.operatorID.Kubeconfig, Args: []string{"watch", "simplewebapps.example.com", "--all-namespaces"}, Want: "yes",
	}); err != nil {
		return nil, err
	}
	e.Step(t0, "ServiceAccount %s/%s bound to the ClusterRole of config/rbac/role.yaml", operatortest.Namespace, operatortest.ServiceAccount)

	bin, err := e.OperatorBin()
	if err != nil {
		return nil, err
	}
	// The operator reads channels from channelsDir before the embedded ones.
	t0 = time.Now()
	e.op, err = operatortest.Start(operatortest.Config{
		Name:       "e2e",
		Bin:        bin,
		Kubeconfig: e.operatorID.Kubeconfig,
		LogPath:    filepath.Join(e.Dir, "operator.log"),
		Args: []string{
			"--metrics-bind-address=0",
			"--leader-elect=false",
			"--zap-log-level=debug",
			"--channels-dir=" + e.channelsDir,
			"--channels-poll-interval=" + channelsPollInterval.String(),
		},
	})
	if err != nil {
		return nil, err
	}
	cleanup(e.op.Kill)
	if err := e.op.WaitReady(ctx, 60*time.Second); err != nil {
		return e, err
	}
	e.Step(t0, "operator ready (log: %s, channels dir: %s)", e.op.LogPath(), e.channelsDir)
	return e, nil
}

// waitGarbageCollectorWatchesCRD waits until kube-controller-manager's garbage
// collector collects the dependents of a deleted SimpleWebApp. It notices a
// new CRD only at its next discovery resync (every 30s) and then retries
// owners it has not seen with a growing backoff, so right after the CRD is
// installed a deletion takes up to a minute; in a cluster whose CRD was
// installed earlier it is immediate, which is what the scenario should
// measure. Each probe is a fresh owner (fresh backoff) with a dependent
// ConfigMap; probes run before the operator starts, so nothing reconciles them.
func (e *testEnv) waitGarbageCollectorWatchesCRD(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-gc-probe"}}
	if err := e.C.Create(ctx, ns); err != nil {
		return err
	}
	defer e.C.Delete(context.Background(), ns)
	probe := func(ctx context.Context) (bool, error) {
		owner := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-probe-", Namespace: ns.Name}}
		if err := e.C.Create(ctx, owner); err != nil {
			return false, err
		}
		dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: owner.Name, Namespace: ns.Name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: webappv1.GroupVersion.String(), Kind: "SimpleWebApp", Name: owner.Name, UID: owner.UID}},
		}}
		if err := e.C.Create(ctx, dependent); err != nil {
			return false, err
		}
		if err := e.C.Delete(ctx, owner); err != nil {
			return false, err
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
			err := e.C.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.ConfigMap{})
			return apierrors.IsNotFound(err), nil
		})
		return err == nil, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, probe); err != nil {
		return fmt.Errorf("waiting for the garbage collector to delete a ConfigMap owned by a deleted SimpleWebApp: %w\n--- kube-controller-manager log tail ---\n%s",
			err, e.Cluster.LogTail(cluster.ControllerManager, 30))
	}
	return nil
}
