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
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/tests/cluster"
)

const (
	operatorNamespace = "simplewebapp-system"
	operatorSA        = "controller-manager"
	managerRole       = "manager-role" // from config/rbac/role.yaml

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
	root         string // repository root
	channelsDir  string // the operator's --channels-dir, empty at start
	stagingDir   string // where files for channelsDir are written before a rename into it
	cluster      *cluster.Cluster
	kubectlBin   string // the cluster's kubectl, never the one on PATH
	kubectlCache string // kubectl's discovery cache, in the run's temp dir
	cs           kubernetes.Interface
	c            client.Client // admin, uncached
	op           *operator
}

// operator is the running operator process.
type operator struct {
	kubeconfig string // its ServiceAccount token, nothing else
	logPath    string
	probeAddr  string // host:port of /healthz and /readyz
	cmd        *exec.Cmd
	exited     chan struct{} // closed when the process has exited
	waitErr    error         // valid once exited is closed
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	e, err := setUp(func(f func()) { cleanups = append(cleanups, f) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup failed:", err)
		if e != nil && e.op != nil {
			fmt.Fprintf(os.Stderr, "--- operator log tail ---\n%s\n", e.op.logTail(50))
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
func keepOperatorLog(op *operator) {
	b, err := os.ReadFile(op.logPath)
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
	logw := io.Discard
	if testing.Verbose() {
		logw = os.Stderr
	}
	step := func(start time.Time, format string, args ...any) {
		fmt.Fprintf(logw, "e2e setup: %s in %s\n", fmt.Sprintf(format, args...), time.Since(start).Round(time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "swa-e2e-")
	if err != nil {
		return nil, err
	}
	cleanup(func() { os.RemoveAll(tmp) })
	e := &testEnv{
		root:         root,
		kubectlCache: filepath.Join(tmp, "kubectl-cache"),
		// Empty: the embedded channels apply until a test writes here.
		channelsDir: filepath.Join(tmp, "channels"),
		// A sibling on the same file system, so a rename into channelsDir is atomic.
		stagingDir: filepath.Join(tmp, "channels-staging"),
	}
	for _, d := range []string{e.channelsDir, e.stagingDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}

	// The operator builds while the cluster starts.
	bin := filepath.Join(tmp, "simplewebapp-operator")
	built := make(chan error, 1)
	go func() {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "example.com/simplewebapp-operator")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		step(t0, "operator built")
		built <- err
	}()

	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Profile:         cluster.ProfileFull,
		ExtraKwokStages: []string{neverReadyStage},
		LogWriter:       logw,
	})
	if err != nil {
		<-built
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	cleanup(func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
		}
	})
	step(t0, "full cluster ready")
	e.cluster = c
	binDir, err := cluster.BinDir()
	if err != nil {
		return nil, err
	}
	e.kubectlBin = filepath.Join(binDir, "kubectl")
	if e.cs, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := webappv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if e.c, err = client.New(c.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}

	t0 = time.Now()
	if _, err := e.kubectl(c.Kubeconfig, "apply", "--server-side", "-f", filepath.Join(root, "config/crd/bases/")); err != nil {
		return nil, err
	}
	if _, err := e.kubectl(c.Kubeconfig, "wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=60s"); err != nil {
		return nil, err
	}
	step(t0, "CRD installed")

	t0 = time.Now()
	if err := e.waitGarbageCollectorWatchesCRD(ctx); err != nil {
		return nil, err
	}
	step(t0, "garbage collector collects dependents of SimpleWebApps")

	t0 = time.Now()
	kubeconfig, err := e.operatorIdentity(ctx, tmp)
	if err != nil {
		return nil, err
	}
	step(t0, "ServiceAccount %s/%s bound to ClusterRole %s", operatorNamespace, operatorSA, managerRole)

	if err := <-built; err != nil {
		return nil, err
	}
	t0 = time.Now()
	e.op, err = startOperator(bin, kubeconfig, e.channelsDir, filepath.Join(tmp, "operator.log"))
	if err != nil {
		return nil, err
	}
	cleanup(e.op.stop)
	if err := e.op.waitReady(ctx); err != nil {
		return e, err
	}
	step(t0, "operator ready (log: %s, channels dir: %s)", e.op.logPath, e.channelsDir)
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
	if err := e.c.Create(ctx, ns); err != nil {
		return err
	}
	defer e.c.Delete(context.Background(), ns)
	probe := func(ctx context.Context) (bool, error) {
		owner := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-probe-", Namespace: ns.Name}}
		if err := e.c.Create(ctx, owner); err != nil {
			return false, err
		}
		dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: owner.Name, Namespace: ns.Name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: webappv1.GroupVersion.String(), Kind: "SimpleWebApp", Name: owner.Name, UID: owner.UID}},
		}}
		if err := e.c.Create(ctx, dependent); err != nil {
			return false, err
		}
		if err := e.c.Delete(ctx, owner); err != nil {
			return false, err
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
			err := e.c.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.ConfigMap{})
			return apierrors.IsNotFound(err), nil
		})
		return err == nil, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, probe); err != nil {
		return fmt.Errorf("waiting for the garbage collector to delete a ConfigMap owned by a deleted SimpleWebApp: %w\n--- kube-controller-manager log tail ---\n%s",
			err, e.cluster.LogTail(cluster.ControllerManager, 30))
	}
	return nil
}

// operatorIdentity creates the operator's namespace and ServiceAccount, binds
// the SA to the generated ClusterRole (applied from config/rbac/role.yaml,
// not rewritten here), and writes a kubeconfig holding only a token of that
// SA. It returns once the API server authorizes the SA.
func (e *testEnv) operatorIdentity(ctx context.Context, dir string) (string, error) {
	admin := e.cluster.Kubeconfig
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace},
	}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if _, err := e.cs.CoreV1().ServiceAccounts(operatorNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: operatorSA},
	}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if _, err := e.kubectl(admin, "apply", "--server-side", "-f", filepath.Join(e.root, "config/rbac/role.yaml")); err != nil {
		return "", err
	}
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-manager-rolebinding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: managerRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: operatorSA, Namespace: operatorNamespace}},
	}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	tok, err := e.cs.CoreV1().ServiceAccounts(operatorNamespace).CreateToken(ctx, operatorSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for %s/%s: %w", operatorNamespace, operatorSA, err)
	}

	adminCfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		return "", err
	}
	cur, ok := adminCfg.Contexts[adminCfg.CurrentContext]
	if !ok || adminCfg.Clusters[cur.Cluster] == nil || len(adminCfg.Clusters[cur.Cluster].CertificateAuthorityData) == 0 {
		return "", fmt.Errorf("%s: no current cluster with an embedded CA", admin)
	}
	server := adminCfg.Clusters[cur.Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server.Server, CertificateAuthorityData: server.CertificateAuthorityData}
	cfg.AuthInfos[operatorSA] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["operator"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: operatorSA}
	cfg.CurrentContext = "operator"
	path := filepath.Join(dir, "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}

	// The RBAC authorizer sees the new binding through an informer.
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last, _ = e.canI(path, "watch", "simplewebapps.example.com", "--all-namespaces")
		return last == "yes", nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the ServiceAccount to be allowed to watch simplewebapps: last answer %q: %w", last, err)
	}
	return path, nil
}

// startOperator starts the operator binary with its own kubeconfig, reading
// channels from channelsDir before the embedded ones, logging to logPath. A
// test binary that dies takes the operator with it (Pdeathsig).
func startOperator(bin, kubeconfig, channelsDir, logPath string) (*operator, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	probeAddr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--metrics-bind-address=0",
		"--health-probe-bind-address="+probeAddr,
		"--leader-elect=false",
		"--zap-log-level=debug",
		"--channels-dir="+channelsDir,
		"--channels-poll-interval="+channelsPollInterval.String(),
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the operator: %w", err)
	}
	op := &operator{kubeconfig: kubeconfig, logPath: logPath, probeAddr: probeAddr, cmd: cmd, exited: make(chan struct{})}
	go func() {
		op.waitErr = cmd.Wait()
		close(op.exited)
	}()
	return op, nil
}

// waitReady waits for the operator's /readyz.
func (op *operator) waitReady(ctx context.Context) error {
	url := "http://" + op.probeAddr + "/readyz"
	hc := &http.Client{Timeout: 2 * time.Second}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if op.hasExited() {
			return false, fmt.Errorf("operator exited: %v", op.waitErr)
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the operator's %s: %w", url, err)
	}
	return nil
}

func (op *operator) hasExited() bool {
	select {
	case <-op.exited:
		return true
	default:
		return false
	}
}

// stop kills the operator and reaps it.
func (op *operator) stop() {
	if !op.hasExited() {
		_ = op.cmd.Process.Kill()
	}
	select {
	case <-op.exited:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "operator (pid %d) did not exit after SIGKILL\n", op.cmd.Process.Pid)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return addr.Port, nil
}
