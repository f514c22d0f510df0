// Package operatortest runs the operator the way it runs in production, for
// the test packages that need that (tests/e2e, tests/operations): the binary
// built from this module, started as its own process, authenticated with a
// TokenRequest token of its own ServiceAccount that is bound only to
// config/rbac, against a full local cluster (internal/localcluster) with the CRD
// installed.
//
// Setup starts the cluster and builds the operator meanwhile;
// SetUpOperatorIdentity and NewServiceAccount make the identities; Start runs
// an operator process; Kubectl runs the cluster's kubectl. Waits come from
// internal/testkit.
package operatortest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/localcluster"
)

// Options configure Setup.
type Options struct {
	// Name is the test package's: it prefixes the temporary directory
	// (swa-<Name>-) and the setup progress lines.
	Name string
	// ExtraKwokStages are passed to the cluster (localcluster.Options).
	ExtraKwokStages []string
	// NoCRD leaves the CRD out, for tests that install it the way a user
	// does (helm install, kubectl apply of an install render).
	NoCRD bool
	// Metrics, HPASyncPeriod and HPADownscaleStabilization are passed to
	// the cluster (localcluster.Options): metrics-server for real autoscaling.
	Metrics                                  bool
	HPASyncPeriod, HPADownscaleStabilization time.Duration
	// AuditLog: the API server logs every write (localcluster.Options.AuditLog).
	AuditLog bool
	// BuildTags build the operator with these tags, e.g. "failpoints"
	// (the crash tests' SWA_TEST_EXIT_AFTER_WRITES; not in a release build).
	BuildTags []string
	// Profile is the cluster's (localcluster.Options.Profile); default
	// localcluster.ProfileFull. localcluster.ProfileNode adds a real node,
	// which imports NodeImages (OCI archives) into its runtime.
	Profile    string
	NodeImages []string
}

// Env is a full local cluster with the CRD installed, admin clients, the
// cluster's kubectl, and the operator binary.
type Env struct {
	Root    string // repository root
	Dir     string // the run's temporary directory, removed at cleanup
	Name    string // Options.Name
	Cluster *localcluster.Cluster
	Kubectl *Kubectl
	CS      kubernetes.Interface
	C       client.Client // admin, uncached; knows SimpleWebApps

	logw        io.Writer // setup progress: stderr with -v, else nothing
	operatorBin func() (string, error)
}

// Setup starts a full cluster, building the operator meanwhile, and installs
// the CRD (config/crd/bases) unless opts.NoCRD. Everything it starts is stopped, and its
// directory removed, by the functions it passes to cleanup, also when it
// fails. It must run after flag.Parse (it asks testing.Verbose).
func Setup(ctx context.Context, opts Options, cleanup func(func())) (*Env, error) {
	e := &Env{Name: opts.Name, logw: io.Discard}
	if testing.Verbose() {
		e.logw = os.Stderr
	}
	var err error
	if e.Root, err = localcluster.RepoRoot(); err != nil {
		return nil, err
	}
	if e.Dir, err = os.MkdirTemp("", "swa-"+opts.Name+"-"); err != nil {
		return nil, err
	}
	cleanup(func() { os.RemoveAll(e.Dir) })

	// The operator builds while the cluster starts.
	e.buildOperator(ctx, opts.BuildTags)
	if err := e.startCluster(ctx, opts, cleanup); err != nil {
		return nil, err
	}
	if err := e.connect(); err != nil {
		return nil, err
	}
	if opts.NoCRD {
		return e, nil
	}
	if err := e.installCRD(); err != nil {
		return nil, err
	}
	return e, nil
}

// buildOperator starts building the operator with the build tags tags, in
// the background; OperatorBin waits for it.
func (e *Env) buildOperator(ctx context.Context, tags []string) {
	bin := filepath.Join(e.Dir, "simplewebapp-operator")
	built := make(chan error, 1)
	go func() {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", strings.Join(tags, ","), "-o", bin, "example.com/simplewebapp-operator")
		cmd.Dir = e.Root
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		e.Step(t0, "operator built")
		built <- err
	}()
	e.operatorBin = sync.OnceValues(func() (string, error) {
		if err := <-built; err != nil {
			return "", err
		}
		return bin, nil
	})
}

// startCluster starts the full cluster of opts and passes its stop to
// cleanup. If it fails, it first waits for the operator's build, which
// writes into the directory that cleanup removes.
func (e *Env) startCluster(ctx context.Context, opts Options, cleanup func(func())) error {
	t0 := time.Now()
	profile := opts.Profile
	if profile == "" {
		profile = localcluster.ProfileFull
	}
	c, err := localcluster.Start(ctx, localcluster.Options{
		Profile:         profile,
		NodeImages:      opts.NodeImages,
		ExtraKwokStages: opts.ExtraKwokStages,
		LogWriter:       e.logw,
		Metrics:         opts.Metrics,

		HPASyncPeriod:             opts.HPASyncPeriod,
		HPADownscaleStabilization: opts.HPADownscaleStabilization,
		AuditLog:                  opts.AuditLog,
	})
	if err != nil {
		_, _ = e.operatorBin()
		return fmt.Errorf("starting the cluster: %w", err)
	}
	cleanup(func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
		}
	})
	e.Step(t0, "%s cluster ready", profile)
	e.Cluster = c
	return nil
}

// connect makes the admin clients of e's cluster: kubectl, a clientset, and
// a client that knows SimpleWebApps.
func (e *Env) connect() error {
	c := e.Cluster
	binDir, err := localcluster.BinDir()
	if err != nil {
		return err
	}
	e.Kubectl = &Kubectl{
		Bin:             filepath.Join(binDir, "kubectl"),
		CacheDir:        filepath.Join(e.Dir, "kubectl-cache"),
		AdminKubeconfig: c.Kubeconfig,
	}
	if e.CS, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := webappv1.AddToScheme(scheme); err != nil {
		return err
	}
	e.C, err = client.New(c.RESTConfig(), client.Options{Scheme: scheme})
	return err
}

// installCRD installs the CRD of config/crd/bases and waits until it is
// established.
func (e *Env) installCRD() error {
	t0 := time.Now()
	if _, err := e.Kubectl.Admin("apply", "--server-side", "-f", filepath.Join(e.Root, "config/crd/bases/")); err != nil {
		return err
	}
	if _, err := e.Kubectl.Admin("wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=60s"); err != nil {
		return err
	}
	e.Step(t0, "CRD installed")
	return nil
}

// OperatorBin waits for the operator's build, started by Setup, and returns
// the binary.
func (e *Env) OperatorBin() (string, error) { return e.operatorBin() }

// Step reports a setup step that began at start, with -v only.
func (e *Env) Step(start time.Time, format string, args ...any) {
	fmt.Fprintf(e.logw, "%s setup: %s in %s\n", e.Name, fmt.Sprintf(format, args...), time.Since(start).Round(time.Millisecond))
}

// Cleanups are functions run in the reverse order of their adding: for a
// TestMain, what its set-up started, stopped once the tests are done.
type Cleanups struct{ fns []func() }

// Add adds f. It fits Setup's cleanup parameter.
func (c *Cleanups) Add(f func()) { c.fns = append(c.fns, f) }

// Run runs the functions, last added first.
func (c *Cleanups) Run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
}
