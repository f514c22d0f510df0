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

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// channelsPollInterval is the operator's --channels-poll-interval: it acts on
// a change of --channels-dir once the content has stayed the same for one
// more interval.
const channelsPollInterval = 500 * time.Millisecond

// env is the shared cluster and operator, set up by TestMain.
var env *testEnv

type testEnv struct {
	*operatortest.Env
	channelsDir string       // the operator's --channels-dir, empty at start
	channels    testkit.Tree // channelsDir, for kit's writers
	operatorID  *operatortest.Identity
	op          *operatortest.Operator
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctrllog.SetLogger(logr.Discard()) // the tests' own clients log nothing
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

	oe, err := operatortest.Setup(ctx, operatortest.Options{Name: "e2e", ExtraKwokStages: []string{localcluster.NeverReadyStage}}, cleanup)
	if err != nil {
		return nil, err
	}
	// Empty: the embedded channels apply until a test writes here.
	e := &testEnv{Env: oe, channelsDir: filepath.Join(oe.Dir, "channels")}
	if err := os.Mkdir(e.channelsDir, 0o755); err != nil {
		return nil, err
	}
	e.channels = testkit.DirTree(e.channelsDir)

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
			// As shipped (config/manager): the tenant test runs an image
			// outside it.
			"--allowed-images=docker.io/nginxinc/nginx-unprivileged",
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
	defer func() {
		// Best effort: a namespace left behind holds only the probe's objects.
		_ = e.C.Delete(context.Background(), ns)
	}()
	probes := 0
	probe := func(ctx context.Context) (bool, string, error) {
		probes++
		owner := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-probe-", Namespace: ns.Name}}
		if err := e.C.Create(ctx, owner); err != nil {
			return false, "", err
		}
		dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: owner.Name, Namespace: ns.Name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: webappv1.GroupVersion.String(), Kind: "SimpleWebApp", Name: owner.Name, UID: owner.UID}},
		}}
		if err := e.C.Create(ctx, dependent); err != nil {
			return false, "", err
		}
		if err := e.C.Delete(ctx, owner); err != nil {
			return false, "", err
		}
		_, seen, err := testkit.Poll(ctx, 100*time.Millisecond, 3*time.Second, func(ctx context.Context) (bool, string, error) {
			err := e.C.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.ConfigMap{})
			return apierrors.IsNotFound(err), fmt.Sprint(err), nil
		})
		return err == nil, fmt.Sprintf("probe %d: the dependent ConfigMap %s after 3s: %s", probes, dependent.Name, seen), nil
	}
	if _, seen, err := testkit.Poll(ctx, 100*time.Millisecond, 2*time.Minute, probe); err != nil {
		return fmt.Errorf("waiting for the garbage collector to delete a ConfigMap owned by a deleted SimpleWebApp: %w (%s)\n--- kube-controller-manager log tail ---\n%s",
			err, seen, e.Cluster.LogTail(localcluster.ControllerManager, 30))
	}
	return nil
}
