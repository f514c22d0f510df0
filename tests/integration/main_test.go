// Package integration runs the reconciler in-process against a real
// kube-apiserver and etcd (envtest, built from pinned sources by tests/tools).
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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/controllers"
	"example.com/simplewebapp-operator/tests/cluster"
)

var (
	k8s    client.Client // admin client, uncached
	scheme = runtime.NewScheme()
	// channelsDir is the operator's --channels-dir: tests write channels and
	// packages into it while the operator runs.
	channelsDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	_ = clientgoscheme.AddToScheme(scheme)
	_ = webappv1.AddToScheme(scheme)

	root, err := cluster.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err := cluster.EnvtestEnvironment(filepath.Join(root, "config", "crd", "bases"))
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

	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   controllers.CacheOptions(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if channelsDir, err = os.MkdirTemp("", "swa-channels-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(channelsDir)
	opts := controllers.Options{
		Channels:             controllers.Channels{FS: testChannels(), Dir: os.DirFS(channelsDir)},
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

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// eventually polls cond until it reports done, failing with its last words.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	t0 := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 25*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var done bool
		done, last = cond()
		return done, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s; last seen: %s", timeout, what, last)
	}
	t.Logf("%s after %s", what, time.Since(t0).Round(time.Millisecond))
}
