// Package cluster starts a local Kubernetes control plane for tests and for
// manual runs: etcd and kube-apiserver (profile "api"), plus
// kube-controller-manager, kube-scheduler and kwok with fake nodes (profile
// "full"). Everything listens on free loopback ports only, with real TLS and
// RBAC, and logs to <Dir>/<component>.log.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Profiles.
const (
	ProfileAPI  = "api"  // etcd + kube-apiserver
	ProfileFull = "full" // + controller-manager, scheduler, kwok and fake nodes
)

// Component (and binary) names, in start order.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kwok              = "kwok"
)

// KwokNodeAnnotation marks the nodes that kwok manages.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

//go:embed kwok-stages.yaml
var kwokStages string

// NeverReadyStage is a kwok Stage (kwok-stage-never-ready.yaml) for
// Options.ExtraKwokStages: a pod labelled NeverReadyLabel=true runs but never
// becomes Ready, as the pods of a broken version would.
//
//go:embed kwok-stage-never-ready.yaml
var NeverReadyStage string

// NeverReadyLabel is the pod label that NeverReadyStage acts on (value "true").
const NeverReadyLabel = "test.simplewebapp.example.com/never-ready"

// Options configure Start.
type Options struct {
	Profile string // ProfileAPI or ProfileFull (default)
	Nodes   int    // fake nodes for ProfileFull; default 3
	BinDir  string // default BinDir()
	// Dir holds certificates, kubeconfigs, logs, etcd data and the pids
	// file. Default: a new temporary directory, removed by Stop.
	Dir string
	// Detach lets the processes outlive this Go process (own process group,
	// no parent-death signal); stop them later with StopFromDir.
	Detach bool
	// ExtraKwokStages are YAML documents with more kwok Stage objects, added
	// to the embedded standard ones (kwok-stages.yaml).
	ExtraKwokStages []string
	LogWriter       io.Writer // progress and timings; default io.Discard

	// Metrics (ProfileFull) runs metrics-server, registered as the
	// metrics.k8s.io API through API aggregation, scraping kwok's emulation
	// of the kubelets' resource metrics: a HorizontalPodAutoscaler scales on
	// the CPU use that UsageCPUAnnotation sets on pods (metrics.go).
	Metrics bool
	// HPASyncPeriod and HPADownscaleStabilization are the
	// kube-controller-manager's --horizontal-pod-autoscaler-sync-period and
	// --horizontal-pod-autoscaler-downscale-stabilization; zero keeps its
	// defaults (15s and 5m).
	HPASyncPeriod, HPADownscaleStabilization time.Duration
	// AuditLog makes kube-apiserver write an audit log to Dir/audit.log
	// (Cluster.AuditLogPath): Metadata level for every write (create,
	// update, patch, delete, deletecollection), nothing for reads. Fault
	// tests judge what a client wrote from it (tests/kit ReadAudit).
	AuditLog bool
	// ServiceCIDR is kube-apiserver's --service-cluster-ip-range. Default
	// DefaultServiceCIDR: a /16 holds 65534 Services (a /24 about 250).
	ServiceCIDR string
	// PodsPerNode is each fake node's pod capacity; default 110 (the
	// kubelet's). 1000 one-replica apps on 3 nodes need at least 334, more
	// during roll-outs (surge pods).
	PodsPerNode int
	// ControllerManagerQPS and ControllerManagerBurst are
	// kube-controller-manager's --kube-api-qps/--kube-api-burst: its client
	// throttle, which bounds how fast ReplicaSets get pods and Deployments
	// report status. 0: its defaults (20 and 30).
	ControllerManagerQPS   float32
	ControllerManagerBurst int
	// SchedulerQPS and SchedulerBurst are kube-scheduler's
	// --kube-api-qps/--kube-api-burst (binding pods). 0: its defaults (50
	// and 100).
	SchedulerQPS   float32
	SchedulerBurst int
	// APIServerArgs are more kube-apiserver flags, e.g. an audit policy
	// (hack/bench counts requests by user from the audit log).
	APIServerArgs []string
}

// DefaultServiceCIDR is the Service IP range unless Options.ServiceCIDR says
// otherwise. kube-apiserver refuses IPv4 ranges larger than a /12.
const DefaultServiceCIDR = "10.0.0.0/16"

// Cluster is a running local control plane.
type Cluster struct {
	Dir        string
	Kubeconfig string // Dir/admin.kubeconfig: cert-based cluster admin
	Profile    string
	PIDs       map[string]int // component name -> pid
	// Time from Start to kube-apiserver /readyz, and to fully ready.
	ReadyzAfter, ReadyAfter time.Duration

	procs   []*proc // start order
	restCfg *rest.Config
	tempDir bool
	log     io.Writer

	// For Restart (faults.go): how components are started and when each is
	// ready again.
	binDir   string
	detach   bool
	auditLog string
	ready    map[string]func(context.Context) bool
}

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restCfg) }

// LogTail returns the last n lines of a component's log.
func (c *Cluster) LogTail(component string, n int) string {
	return tailFile(filepath.Join(c.Dir, component+".log"), n)
}

// Start starts a cluster and waits until it is ready. On error everything it
// started is stopped again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	// Free ports are found by listening on :0 and closing, so another process
	// (a test package starting its own cluster in parallel) can take one
	// before a component binds it. Then start again with new ports.
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, opts)
		if err == nil || attempt == 3 || ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
		fmt.Fprintf(logWriter(opts), "cluster: a port was taken meanwhile, starting again (attempt %d): %v\n", attempt+1, err)
	}
}

func logWriter(opts Options) io.Writer {
	if opts.LogWriter == nil {
		return io.Discard
	}
	return opts.LogWriter
}

func start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	t0 := time.Now()
	if opts.Profile == "" {
		opts.Profile = ProfileFull
	}
	if opts.Profile != ProfileAPI && opts.Profile != ProfileFull {
		return nil, fmt.Errorf("unknown profile %q (want %q or %q)", opts.Profile, ProfileAPI, ProfileFull)
	}
	if opts.Metrics && opts.Profile != ProfileFull {
		return nil, fmt.Errorf("Options.Metrics needs profile %q (kwok, controllers)", ProfileFull)
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	if opts.ServiceCIDR == "" {
		opts.ServiceCIDR = DefaultServiceCIDR
	}
	if opts.PodsPerNode <= 0 {
		opts.PodsPerNode = 110
	}
	if opts.LogWriter == nil {
		opts.LogWriter = io.Discard
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = BinDir(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{Dir: opts.Dir, Profile: opts.Profile, PIDs: map[string]int{}, log: opts.LogWriter,
		binDir: opts.BinDir, detach: opts.Detach, ready: map[string]func(context.Context) bool{}}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "swa-cluster-"); err != nil {
			return nil, err
		}
		c.tempDir = true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (state and logs in %s)", err, c.Dir)
			if stopErr := c.stop(false); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()

	pki, err := newPKI(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	var mpki *metricsPKI
	if opts.Metrics {
		if mpki, err = newMetricsPKI(c.Dir, pki.ca); err != nil {
			return nil, fmt.Errorf("certificates: %w", err)
		}
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	server := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	c.restCfg = &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pki.ca.certPEM, CertData: pki.admin.certPEM, KeyData: pki.admin.keyPEM,
		},
		QPS: 200, Burst: 400, // a test cluster: no need for client-side throttling
	}
	kubeconfigs := map[string]*keyPair{"admin": pki.admin, ControllerManager: pki.kcm, Scheduler: pki.scheduler, Kwok: pki.kwok}
	for name, kp := range kubeconfigs {
		if err := writeKubeconfig(filepath.Join(c.Dir, name+".kubeconfig"), server, pki.ca, kp); err != nil {
			return nil, err
		}
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	// extraArgs are appended to a component's flags (options such as
	// AuditLog).
	extraArgs := map[string][]string{}
	if opts.AuditLog {
		if extraArgs[APIServer], err = c.auditArgs(); err != nil {
			return nil, err
		}
	}
	start := func(name string, args ...string) error {
		p, err := startProc(c.Dir, opts.BinDir, name, opts.Detach, append(append(args, extraArgs[name]...), extraFlags(opts)[name]...))
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
		c.PIDs[name] = p.pid
		// Rewritten after every start, so that StopFromDir finds even a
		// half-started cluster.
		return writePIDs(c.Dir, c.procs)
	}
	fmt.Fprintf(c.log, "cluster: certificates in %s\n", since(t0))

	// etcd: plain HTTP on loopback; fsync off because the data is throwaway.
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	if err := start(Etcd,
		"--name=default", "--data-dir="+filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return nil, err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	c.ready[Etcd] = func(ctx context.Context) bool { return httpOK(ctx, plain, etcdURL+"/health") }
	if err := c.waitComponent(ctx, Etcd, "etcd /health", 30*time.Second, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, plain, etcdURL+"/health"), nil
	}); err != nil {
		return nil, err
	}

	apiserverArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + c.Dir,
		"--tls-cert-file=" + pki.apiserver.certFile, "--tls-private-key-file=" + pki.apiserver.keyFile,
		"--client-ca-file=" + pki.ca.certFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saPubFile,
		"--service-account-signing-key-file=" + pki.saKeyFile,
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + opts.ServiceCIDR,
		// Without it a privileged pod fails validation before Pod Security
		// admission (on by default) could reject it.
		"--allow-privileged=true",
		// v1.37 refuses a loopback advertise address while the endpoint
		// reconciler is on; the "kubernetes" Endpoints are not needed here.
		"--endpoint-reconciler-type=none",
	}
	if mpki != nil {
		apiserverArgs = append(apiserverArgs, mpki.apiserverArgs()...)
	}
	if err := start(APIServer, apiserverArgs...); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(pki.ca.cert)
	// An anonymous HTTPS client that verifies our CA: /readyz and /healthz are
	// readable without credentials.
	verified := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	if err := c.waitComponent(ctx, APIServer, "kube-apiserver /readyz", 90*time.Second, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, verified, server+"/readyz"), nil
	}); err != nil {
		return nil, err
	}
	c.ready[APIServer] = func(ctx context.Context) bool { return httpOK(ctx, verified, server+"/readyz") }
	c.ReadyzAfter = time.Since(t0)
	fmt.Fprintf(c.log, "cluster: start to kube-apiserver /readyz: %s\n", c.ReadyzAfter.Round(time.Millisecond))

	client, err := kubernetes.NewForConfig(c.restCfg)
	if err != nil {
		return nil, err
	}
	if opts.Profile == ProfileFull {
		if err := c.startFull(ctx, opts, pki, mpki, client, start, verified, kcmPort, schedPort, kwokPort); err != nil {
			return nil, err
		}
	}
	c.ReadyAfter = time.Since(t0)
	fmt.Fprintf(c.log, "cluster: start to %s profile ready: %s (%s)\n", opts.Profile, c.ReadyAfter.Round(time.Millisecond), c.Dir)
	return c, nil
}

// startFull starts the controllers and kwok, creates the fake nodes and waits
// until the cluster can run pods.
func (c *Cluster) startFull(ctx context.Context, opts Options, pki *pki, mpki *metricsPKI, client kubernetes.Interface,
	start func(string, ...string) error, https *http.Client, kcmPort, schedPort, kwokPort int) error {
	kcmKubeconfig := filepath.Join(c.Dir, ControllerManager+".kubeconfig")
	kcmArgs := []string{
		"--kubeconfig=" + kcmKubeconfig,
		"--authentication-kubeconfig=" + kcmKubeconfig, "--authorization-kubeconfig=" + kcmKubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(kcmPort),
		"--tls-cert-file=" + pki.serving.certFile, "--tls-private-key-file=" + pki.serving.keyFile,
		"--service-account-private-key-file=" + pki.saKeyFile,
		"--root-ca-file=" + pki.ca.certFile,
		"--cluster-signing-cert-file=" + pki.ca.certFile, "--cluster-signing-key-file=" + pki.ca.keyFile,
		"--use-service-account-credentials",
		"--leader-elect=false",
		// No pod CIDRs are allocated: kwok assigns pod IPs itself.
		"--controllers=*,-nodeipam",
	}
	if err := start(ControllerManager, append(kcmArgs, hpaArgs(opts)...)...); err != nil {
		return err
	}
	schedKubeconfig := filepath.Join(c.Dir, Scheduler+".kubeconfig")
	if err := start(Scheduler,
		"--kubeconfig="+schedKubeconfig,
		"--authentication-kubeconfig="+schedKubeconfig, "--authorization-kubeconfig="+schedKubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
		"--tls-cert-file="+pki.serving.certFile, "--tls-private-key-file="+pki.serving.keyFile,
		"--leader-elect=false",
	); err != nil {
		return err
	}
	stages := kwokStages
	for _, s := range opts.ExtraKwokStages {
		stages += "\n---\n" + s
	}
	if mpki != nil {
		stages += "\n---\n" + kwokMetrics
	}
	stagesFile := filepath.Join(c.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesFile, []byte(stages), 0o644); err != nil {
		return err
	}
	kwokArgs := []string{
		"--kubeconfig=" + filepath.Join(c.Dir, Kwok+".kubeconfig"),
		"--config=" + stagesFile,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--node-ip=127.0.0.1",
		"--cidr=10.244.0.1/16", // pod IPs: data only, nothing is routed
		"--server-address=127.0.0.1:" + strconv.Itoa(kwokPort),
		// Node heartbeats are Leases (the heartbeat-with-lease stage only
		// refreshes status every ~10 min). kwok creates and renews no Lease
		// unless this is set, and then the node lifecycle controller marks every
		// node NotReady 50 s after start and every pod Ready=False.
		"--node-lease-duration-seconds=40",
	}
	if mpki != nil {
		kwokArgs = append(kwokArgs, kwokMetricsArgs(pki)...)
	}
	if err := start(Kwok, kwokArgs...); err != nil {
		return err
	}

	for i := range opts.Nodes {
		node := fakeNode(fmt.Sprintf("kwok-node-%d", i), opts.PodsPerNode)
		if mpki != nil {
			node.Annotations[ResourceMetricsPathAnnotation] = resourceMetricsPath(node.Name)
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node: %w", err)
		}
	}

	for _, h := range []struct {
		name string
		port int
	}{{ControllerManager, kcmPort}, {Scheduler, schedPort}} {
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", h.port)
		c.ready[h.name] = func(ctx context.Context) bool { return httpOK(ctx, https, url) }
		if err := c.waitComponent(ctx, h.name, h.name+" /healthz", 60*time.Second, func(ctx context.Context) (bool, error) {
			return httpOK(ctx, https, url), nil
		}); err != nil {
			return err
		}
	}
	if err := c.waitComponent(ctx, Kwok, fmt.Sprintf("%d kwok nodes Ready", opts.Nodes), 60*time.Second, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, nil //nolint:nilerr // transient: keep polling
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= opts.Nodes, nil
	}); err != nil {
		return err
	}
	// Pods can only be created in a namespace once its default ServiceAccount
	// exists (ServiceAccount admission); the controller-manager creates it.
	if err := c.waitComponent(ctx, ControllerManager, "ServiceAccount default/default", 60*time.Second, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	if mpki != nil {
		return c.startMetricsServer(ctx, opts, pki, mpki, client, start, kwokPort)
	}
	return nil
}

// fakeNode is a Node for kwok to manage, with the capacity the scheduler sees.
func fakeNode(name string, pods int) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
			Labels: map[string]string{
				"type":                   "kwok",
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
			},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
}

// extraFlags are the flags of the components that Options add: client
// throttles, extra kube-apiserver flags.
func extraFlags(opts Options) map[string][]string {
	return map[string][]string{
		APIServer:         opts.APIServerArgs,
		ControllerManager: qpsFlags(opts.ControllerManagerQPS, opts.ControllerManagerBurst),
		Scheduler:         qpsFlags(opts.SchedulerQPS, opts.SchedulerBurst),
	}
}

// qpsFlags are a component's client throttle flags; none for zero values
// (the component's defaults).
func qpsFlags(qps float32, burst int) []string {
	var out []string
	if qps > 0 {
		out = append(out, "--kube-api-qps="+strconv.FormatFloat(float64(qps), 'f', -1, 32))
	}
	if burst > 0 {
		out = append(out, "--kube-api-burst="+strconv.Itoa(burst))
	}
	return out
}

// waitComponent is the start-up wait for one component: it polls cond every
// 100ms until it is true, timeout passes or the component exits. The error
// names what it waited for and ends with the component's last log lines.
// (Tests wait with tests/kit, which sits above this package; the cluster
// starter for `make cluster-up` does not link the test kit.)
func (c *Cluster) waitComponent(ctx context.Context, component, what string, timeout time.Duration,
	cond func(context.Context) (bool, error)) error {
	var p *proc
	for _, q := range c.procs {
		if q.name == component {
			p = q
		}
	}
	t0 := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if p != nil && p.exited() {
			return false, fmt.Errorf("%s exited", component)
		}
		return cond(ctx)
	})
	if err != nil {
		if ctx.Err() != nil { // cancelled by the caller: the log is not the story
			return fmt.Errorf("waiting for %s (%s): %w", what, since(t0), ctx.Err())
		}
		return fmt.Errorf("waiting for %s (%s): %w\n--- last lines of %s.log ---\n%s",
			what, since(t0), err, component, c.LogTail(component, 40))
	}
	fmt.Fprintf(c.log, "cluster: %s (waited %s)\n", what, since(t0))
	return nil
}

// Stop stops every component (kwok first, etcd last), verifies that each is
// gone, and removes Dir when Start created it.
func (c *Cluster) Stop() error {
	t0 := time.Now()
	err := c.stop(true)
	fmt.Fprintf(c.log, "cluster: stopped in %s\n", since(t0))
	return err
}

func (c *Cluster) stop(removeDir bool) error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := stopPID(c.procs[i].name, c.procs[i].pid, c.procs[i].done); err != nil {
			errs = append(errs, err)
		}
	}
	// Keep a failed start's logs for inspection; the error names the dir.
	if removeDir && c.tempDir && len(errs) == 0 {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeKubeconfig writes a kubeconfig with embedded CA and client certificate.
func writeKubeconfig(path, server string, ca, client *keyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca.certPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: client.certPEM, ClientKeyData: client.keyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

// FreePorts reserves n distinct free loopback TCP ports. All listeners are
// held until every port is chosen, so no port is handed out twice.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func httpOK(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
