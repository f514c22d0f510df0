// Package autoscaling shows spec.autoscaling end to end on simulated load:
// the real HorizontalPodAutoscaler controller of kube-controller-manager scales
// a SimpleWebApp on CPU use read from metrics-server, which scrapes kwok's
// emulation of the kubelets' resource metrics. The test sets the load as each
// pod's CPU use (kwok's pod annotation), as a load generator would make it.
//
// Like tests/e2e, the operator binary runs as its own process with its own
// ServiceAccount bound only to config/rbac, against a full local cluster
// (internal/localcluster with Options.Metrics). metrics-server is built by
// hack/tools/build-metrics-server.sh (make tools); without it the set-up
// fails and says so.
package autoscaling

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
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
)

// The kube-controller-manager's HPA settings here, shorter than its defaults
// (15s, 5m) so that the test takes a minute or two, not ten.
const (
	hpaSyncPeriod             = 5 * time.Second
	hpaDownscaleStabilization = 15 * time.Second
)

// env is the shared cluster and operator, set up by TestMain.
var env *testEnv

type testEnv struct {
	*operatortest.Env
	op *operatortest.Operator
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard()) // the tests' own clients log nothing
	var cleanups operatortest.Cleanups
	defer cleanups.Run()
	e, err := setUp(cleanups.Add)
	if err != nil {
		fmt.Fprintln(os.Stderr, "autoscaling setup failed:", err)
		if e != nil && e.op != nil {
			fmt.Fprintf(os.Stderr, "--- operator log tail ---\n%s\n", e.op.LogTail(50))
		}
		return 1
	}
	env = e
	code := m.Run()
	if code != 0 {
		keepLogs(e)
	}
	return code
}

// keepLogs copies the operator's, metrics-server's and the
// controller-manager's logs out of the run's directories, which are removed
// at the end, so that a failure can be looked at afterwards.
func keepLogs(e *testEnv) {
	dir, err := os.MkdirTemp("", "swa-autoscaling-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeping the logs:", err)
		return
	}
	logs := map[string]string{"operator.log": e.op.LogPath()}
	for _, c := range []string{localcluster.MetricsServer, localcluster.ControllerManager, localcluster.Kwok, localcluster.APIServer} {
		logs[c+".log"] = filepath.Join(e.Cluster.Dir, c+".log")
	}
	var errs []error
	for name, path := range logs {
		b, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "keeping the logs:", err)
	}
	fmt.Fprintf(os.Stderr, "the logs of the operator and the cluster are kept in %s\n", dir)
}

// setUp starts the cluster with metrics-server, installs the CRD and the
// operator's RBAC, and starts the operator with a token of its
// ServiceAccount.
func setUp(cleanup func(func())) (*testEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	oe, err := operatortest.Setup(ctx, operatortest.Options{
		Name:                      "autoscaling",
		Metrics:                   true,
		HPASyncPeriod:             hpaSyncPeriod,
		HPADownscaleStabilization: hpaDownscaleStabilization,
	}, cleanup)
	if err != nil {
		return nil, err
	}
	e := &testEnv{Env: oe}
	e.op, err = e.StartOperator(ctx, operatortest.OperatorRBAC{ClusterRoleBinding: "autoscaling-manager-rolebinding"},
		[]string{"--metrics-bind-address=0", "--leader-elect=false"}, cleanup)
	if err != nil {
		return e, err
	}
	return e, nil
}
