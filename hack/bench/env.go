package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
)

// The measured identities: the operator's ServiceAccount (as config/default
// deploys it) and the bare client's.
const (
	operatorUser = "system:serviceaccount:" + operatortest.Namespace + ":" + operatortest.ServiceAccount
	bareNS       = "bench"
	bareSA       = "bare"
	bareUser     = "system:serviceaccount:" + bareNS + ":" + bareSA
)

// env is one fresh cluster with the CRD of a build installed, the
// identities, and the audit log.
type env struct {
	*operatortest.Env
	audit  *auditLog
	scheme *runtime.Scheme
	opID   *operatortest.Identity
	bareID *operatortest.Identity
	track  *tracker
}

// newEnv starts a cluster in dir for the build whose checkout is root (its
// CRD and generated role are installed).
func newEnv(ctx context.Context, dir, root string, o opts) (*env, error) {
	c, auditPath, err := startAuditedCluster(ctx, dir, o)
	if err != nil {
		return nil, err
	}
	e := &env{Env: &operatortest.Env{Root: root, Dir: dir, Name: "bench", Cluster: c}, audit: &auditLog{path: auditPath}}
	if err := e.connect(); err != nil {
		return e, err
	}
	if err := e.installCRD(root); err != nil {
		return e, err
	}
	if err := e.setUpIdentities(ctx); err != nil {
		return e, err
	}
	if err := e.createNamespaces(ctx, o.namespaces); err != nil {
		return e, err
	}
	if e.track, err = newTracker(ctx, c.RESTConfig(), e.scheme); err != nil {
		return e, err
	}
	return e, nil
}

// startAuditedCluster starts a full cluster in dir whose API server logs the
// measured identities' requests to the returned audit log path.
func startAuditedCluster(ctx context.Context, dir string, o opts) (*localcluster.Cluster, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy(operatorUser, bareUser)), 0o644); err != nil {
		return nil, "", err
	}
	auditPath := filepath.Join(dir, "audit.log")
	t0 := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{
		Profile:                localcluster.ProfileFull,
		Dir:                    filepath.Join(dir, "cluster"),
		Nodes:                  o.nodes,
		PodsPerNode:            o.podsPerNode,
		ControllerManagerQPS:   o.kcmQPS,
		ControllerManagerBurst: o.kcmBurst,
		SchedulerQPS:           o.schedQPS,
		SchedulerBurst:         o.schedBurst,
		APIServerArgs: []string{
			"--audit-policy-file=" + policy,
			"--audit-log-path=" + auditPath,
			"--audit-log-format=json",
			"--audit-log-maxsize=0", // one file, never rotated
		},
	})
	if err != nil {
		return nil, "", err
	}
	logf("  cluster ready in %s (%s)", time.Since(t0).Round(time.Second), c.Dir)
	return c, auditPath, nil
}

// connect makes the admin clients of e's cluster: kubectl, a clientset, and
// a client that knows SimpleWebApps.
func (e *env) connect() error {
	c := e.Cluster
	binDir, err := localcluster.BinDir()
	if err != nil {
		return err
	}
	e.Kubectl = &operatortest.Kubectl{Bin: filepath.Join(binDir, "kubectl"), CacheDir: filepath.Join(e.Dir, "kubectl-cache"), AdminKubeconfig: c.Kubeconfig}
	if e.CS, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return err
	}
	e.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(e.scheme); err != nil {
		return err
	}
	if err := webappv1.AddToScheme(e.scheme); err != nil {
		return err
	}
	e.C, err = client.New(c.RESTConfig(), client.Options{Scheme: e.scheme})
	return err
}

// installCRD installs the CRD of the checkout root and waits until it is
// established.
func (e *env) installCRD(root string) error {
	if _, err := e.Kubectl.Admin("apply", "--server-side", "-f", filepath.Join(root, "config/crd/bases/")); err != nil {
		return err
	}
	_, err := e.Kubectl.Admin("wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=60s")
	return err
}

// setUpIdentities makes the operator's identity (its generated role) and the
// bare client's (cluster-admin), and waits until the API server authorizes
// both.
func (e *env) setUpIdentities(ctx context.Context) error {
	var err error
	if e.opID, err = e.SetUpOperatorIdentity(ctx, operatortest.OperatorRBAC{ClusterRoleBinding: "bench-operator"}); err != nil {
		return err
	}
	if _, err := e.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bareNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if e.bareID, err = e.NewServiceAccount(ctx, bareNS, bareSA); err != nil {
		return err
	}
	if err := e.BindClusterRole(ctx, "bench-bare", "cluster-admin", e.bareID); err != nil {
		return err
	}
	return e.Kubectl.WaitCanI(ctx, time.Minute,
		operatortest.CanIWant{Kubeconfig: e.opID.Kubeconfig, Args: []string{"watch", "simplewebapps.example.com", "--all-namespaces"}, Want: "yes"},
		operatortest.CanIWant{Kubeconfig: e.bareID.Kubeconfig, Args: []string{"create", "simplewebapps.example.com", "-n", "default"}, Want: "yes"},
	)
}

// createNamespaces creates the n namespaces the apps are spread over and
// waits for their default ServiceAccounts.
func (e *env) createNamespaces(ctx context.Context, n int) error {
	for i := range n {
		if _, err := e.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// Pods need the namespace's default ServiceAccount (made by the
	// controller-manager).
	for i := range n {
		if _, ok := waitUntil(time.Minute, func() bool {
			_, err := e.CS.CoreV1().ServiceAccounts(nsName(i)).Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		}, func() string { return "default ServiceAccount of " + nsName(i) }); !ok {
			return fmt.Errorf("no default ServiceAccount in %s", nsName(i))
		}
	}
	return nil
}

func (e *env) stop() {
	if e.track != nil {
		e.track.stop()
	}
	if e.Cluster != nil {
		if err := e.Cluster.Stop(); err != nil {
			logf("stopping the cluster: %v", err)
		}
	}
}

// restConfig is the client configuration of a kubeconfig, unthrottled as
// controller-runtime's GetConfig makes the operator's (QPS -1: API Priority
// and Fairness is the only limit).
func restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = -1
	return cfg, nil
}

func nsName(i int) string { return fmt.Sprintf("bench-%d", i) }
