// Package operations tests how the operator is run in production: leader
// election between replicas (and how long a takeover takes), the secure
// metrics endpoint, structured logs, and that the dashboards and alerts in
// config/prometheus match the metrics the operator really serves.
//
// Like tests/e2e, the operator binary runs as its own process, authenticated
// with a TokenRequest token of its own ServiceAccount that is bound only to
// config/rbac (role.yaml cluster-wide, leader_election_role.yaml in the
// operator namespace). The tests share one full local cluster and run one
// after another: every operator started here watches all namespaces, so two
// tests' operators running at once would reconcile each other's resources.
package operations

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
)

const (
	metricsReaderRole = "metrics-reader" // config/rbac/metrics_reader_role.yaml
	// leaseName is the LeaderElectionID set in main.go.
	leaseName = "simplewebapp-operator.example.com"

	scraperSA  = "metrics-scraper" // bound to metricsReaderRole
	noRightsSA = "no-metrics"      // bound to nothing
)

// env is the shared cluster and identities, set up by TestMain.
var env *testEnv

type testEnv struct {
	*operatortest.Env
	bin string // the operator binary

	operatorID *operatortest.Identity // the operator's ServiceAccount
	scraper    *operatortest.Identity // may GET /metrics
	noRights   *operatortest.Identity // authenticates, may not GET /metrics

	// metricsCertDir holds tls.crt/tls.key for 127.0.0.1, signed by metricsCA,
	// passed to the operator as --metrics-cert-dir.
	metricsCertDir string
	metricsCA      *x509.CertPool
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var cleanups operatortest.Cleanups
	defer cleanups.Run()
	e, err := setUp(cleanups.Add)
	if err != nil {
		fmt.Fprintln(os.Stderr, "operations setup failed:", err)
		return 1
	}
	env = e
	return m.Run()
}

func setUp(cleanup func(func())) (*testEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	oe, err := operatortest.Setup(ctx, operatortest.Options{Name: "operations"}, cleanup)
	if err != nil {
		return nil, err
	}
	e := &testEnv{Env: oe}

	t0 := time.Now()
	if err := e.identities(ctx); err != nil {
		return nil, err
	}
	e.Step(t0, "ServiceAccounts %s (manager-role, leader-election-role), %s (metrics-reader), %s (nothing)", operatortest.ServiceAccount, scraperSA, noRightsSA)

	if err := e.writeMetricsCert(); err != nil {
		return nil, err
	}
	if e.bin, err = e.OperatorBin(); err != nil {
		return nil, err
	}
	return e, nil
}

// identities creates the operator namespace and three ServiceAccounts in it:
//   - the operator's, bound to the generated ClusterRole (config/rbac/role.yaml)
//     and to the leader election Role (config/rbac/leader_election_role.yaml
//     and its binding, moved from the kustomize placeholder namespace "system"
//     to the operator namespace, as config/default does);
//   - a scraper bound to config/rbac/metrics_reader_role.yaml;
//   - one bound to nothing.
//
// Each has a token and a kubeconfig holding only it. It returns once the API
// server's authorizer sees every binding.
func (e *testEnv) identities(ctx context.Context) error {
	var err error
	if e.operatorID, err = e.SetUpOperatorIdentity(ctx, operatortest.OperatorRBAC{
		ClusterRoleBinding: "operations-manager-rolebinding",
		LeaderElection:     true,
	}); err != nil {
		return err
	}
	if e.scraper, err = e.NewServiceAccount(ctx, operatortest.Namespace, scraperSA); err != nil {
		return err
	}
	if e.noRights, err = e.NewServiceAccount(ctx, operatortest.Namespace, noRightsSA); err != nil {
		return err
	}
	if _, err := e.Kubectl.Admin("apply", "--server-side", "-f", filepath.Join(e.Root, "config/rbac/metrics_reader_role.yaml")); err != nil {
		return err
	}
	if err := e.BindClusterRole(ctx, "operations-metrics-reader", metricsReaderRole, e.scraper); err != nil {
		return err
	}

	op := e.operatorID.Kubeconfig
	return e.Kubectl.WaitCanI(ctx, time.Minute,
		operatortest.CanIWant{Kubeconfig: op, Args: []string{"watch", "simplewebapps.example.com", "--all-namespaces"}, Want: "yes"},
		operatortest.CanIWant{Kubeconfig: op, Args: []string{"update", "leases.coordination.k8s.io", "-n", operatortest.Namespace}, Want: "yes"},
		operatortest.CanIWant{Kubeconfig: op, Args: []string{"create", "subjectaccessreviews.authorization.k8s.io"}, Want: "yes"},
		operatortest.CanIWant{Kubeconfig: op, Args: []string{"create", "leases.coordination.k8s.io", "-n", "default"}, Want: "no"},
		operatortest.CanIWant{Kubeconfig: e.scraper.Kubeconfig, Args: []string{"get", "/metrics"}, Want: "yes"},
		operatortest.CanIWant{Kubeconfig: e.noRights.Kubeconfig, Args: []string{"get", "/metrics"}, Want: "no"},
	)
}

// writeMetricsCert makes a CA and a serving certificate for 127.0.0.1 signed
// by it, in the layout --metrics-cert-dir expects (tls.crt, tls.key). With it
// the scrapes verify the operator's certificate instead of skipping
// verification, as a Prometheus with a cert-manager CA would.
func (e *testEnv) writeMetricsCert() error {
	e.metricsCertDir = filepath.Join(e.Dir, "metrics-certs")
	if err := os.Mkdir(e.metricsCertDir, 0o700); err != nil {
		return err
	}
	var err error
	e.metricsCA, err = localcluster.WriteServingCert(e.metricsCertDir, "simplewebapp-operator-metrics")
	return err
}
