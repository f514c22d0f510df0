// Package integration runs the reconciler in-process against a real
// kube-apiserver and etcd (envtest, built from pinned sources by hack/tools).
// There is no controller-manager here: no Deployment controller and no
// garbage collector, so these tests check what the operator writes; the
// end-to-end tests in tests/e2e check the cluster's reaction.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/controllers"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/objcache"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

var (
	k8s client.Client // admin client, uncached
	// adminCfg is k8s's configuration, for the tests that watch.
	adminCfg *rest.Config
	scheme   = runtime.NewScheme()
	// channelsDir is the operator's --channels-dir: tests write channels and
	// packages into it while the operator runs.
	channelsDir testkit.Tree
)

// testNS is every test's namespace. Kept at the end: without a
// controller-manager a deleted namespace never goes away, and the operator
// would keep reconciling into it.
var testNS = testkit.NS{Prefix: "it-", Keep: true}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	_ = clientgoscheme.AddToScheme(scheme)
	_ = webappv1.AddToScheme(scheme)

	root, err := localcluster.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err := localcluster.EnvtestEnvironment(filepath.Join(root, "config", "crd", "bases"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	t0 := time.Now()
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer env.Stop() //nolint:errcheck
	fmt.Fprintf(os.Stderr, "envtest started in %s\n", time.Since(t0).Round(time.Millisecond))

	adminCfg = cfg
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The operator runs with nothing but the generated role
	// (config/rbac/role.yaml), as its ServiceAccount: a kind or verb the
	// markers miss fails here as it would in a real install.
	operatorCfg, err := operatortest.ImpersonatingOperator(context.Background(), k8s, cfg, root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "operator identity:", err)
		return 1
	}
	mgr, err := ctrl.NewManager(operatorCfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   objcache.CacheOptions(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "swa-channels-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	channelsDir = testkit.DirTree(dir)
	opts := controllers.Options{
		Channels:             render.Channels{FS: testChannels(), Dir: os.DirFS(dir)},
		ChannelsPollInterval: 100 * time.Millisecond,
	}
	if _, err := controllers.Setup(mgr, opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
			os.Exit(1)
		}
	}()
	return m.Run()
}
