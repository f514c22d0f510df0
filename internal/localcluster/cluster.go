// Package localcluster starts a local Kubernetes control plane for tests and for
// manual runs: etcd and kube-apiserver (profile "api"), plus
// kube-controller-manager, kube-scheduler and kwok with fake nodes (profile
// "full"), plus one real node: kubelet, containerd, CNI and kube-proxy on
// this machine (profile "node", root only; node*.go and docs/real-node.md).
// Everything listens on free loopback ports only (profile node: the
// kube-apiserver on the node's bridge address), with real TLS and RBAC, and
// logs to <Dir>/<component>.log.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// Cluster is a running local control plane.
type Cluster struct {
	Dir        string
	Kubeconfig string // Dir/admin.kubeconfig: cert-based cluster admin
	Profile    string
	PIDs       map[string]int // component name -> pid
	// Time from Start to kube-apiserver /readyz, and to fully ready.
	ReadyzAfter, ReadyAfter time.Duration
	// Node is the real node; nil unless one runs (ProfileNode as root).
	Node *RealNode

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
	// extraArgs are appended to a component's own flags (componentFlags).
	extraArgs map[string][]string
	// nodeState is the real node being started or running (set before
	// anything of the host is changed, for the teardown); nodeLock its lock.
	nodeState *RealNode
	nodeLock  *nodeLock
}

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restCfg) }

// Start starts a cluster and waits until it is ready. On error everything it
// started is stopped again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts = realNodeOrFallback(opts)
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

// start is one attempt of Start: credentials and configuration first, then
// etcd and kube-apiserver, then the rest of the full profile.
func start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	t0 := time.Now()
	if opts, err = withDefaults(opts); err != nil {
		return nil, err
	}
	c, err := newCluster(opts)
	if err != nil {
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

	host := "127.0.0.1"
	var apiserverIPs []net.IP
	if opts.Profile == ProfileNode {
		// The bridge must exist before the kube-apiserver listens on it.
		if err := c.prepareNode(ctx, opts); err != nil {
			return nil, err
		}
		host = nodeIP
		apiserverIPs = append(apiserverIPs, net.ParseIP(nodeIP))
	}
	pki, err := newPKI(c.Dir, apiserverIPs...)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	var mpki *metricsPKI
	if opts.Metrics {
		if mpki, err = newMetricsPKI(c.Dir, pki.ca); err != nil {
			return nil, fmt.Errorf("certificates: %w", err)
		}
	}
	ports, err := freeComponentPorts()
	if err != nil {
		return nil, err
	}
	server := "https://" + net.JoinHostPort(host, strconv.Itoa(ports.apiServer))
	c.restCfg = adminRESTConfig(server, pki)
	if err := c.writeKubeconfigs(server, pki); err != nil {
		return nil, err
	}
	if c.extraArgs, err = c.componentFlags(opts); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.log, "cluster: certificates in %s\n", since(t0))

	etcdURL, err := c.startEtcd(ctx, ports)
	if err != nil {
		return nil, err
	}
	https, err := c.startAPIServer(ctx, opts, pki, mpki, etcdURL, server, ports.apiServer)
	if err != nil {
		return nil, err
	}
	c.ReadyzAfter = time.Since(t0)
	fmt.Fprintf(c.log, "cluster: start to kube-apiserver /readyz: %s\n", c.ReadyzAfter.Round(time.Millisecond))

	client, err := kubernetes.NewForConfig(c.restCfg)
	if err != nil {
		return nil, err
	}
	if opts.Profile == ProfileFull || opts.Profile == ProfileNode {
		if err := c.startFull(ctx, opts, pki, mpki, client, https, ports); err != nil {
			return nil, err
		}
	}
	if opts.Profile == ProfileNode {
		if err := c.startNode(ctx, opts, pki, client); err != nil {
			return nil, err
		}
		if c.detach {
			// The node outlives this process: the lock becomes an owner
			// record naming its processes (node_lock.go).
			if err := c.nodeLock.detach(c.Dir, c.PIDs); err != nil {
				return nil, err
			}
			c.nodeLock = nil
		}
	}
	c.ReadyAfter = time.Since(t0)
	fmt.Fprintf(c.log, "cluster: start to %s profile ready: %s (%s)\n", opts.Profile, c.ReadyAfter.Round(time.Millisecond), c.Dir)
	return c, nil
}

// newCluster returns an empty Cluster for opts with its state directory
// created (a new temporary one unless opts.Dir is set).
func newCluster(opts Options) (*Cluster, error) {
	c := &Cluster{Dir: opts.Dir, Profile: opts.Profile, PIDs: map[string]int{}, log: opts.LogWriter,
		binDir: opts.BinDir, detach: opts.Detach, ready: map[string]func(context.Context) bool{}}
	if c.Dir == "" {
		var err error
		if c.Dir, err = os.MkdirTemp("", "swa-cluster-"); err != nil {
			return nil, err
		}
		c.tempDir = true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	return c, nil
}

// componentFlags are the flags that Options add to each component: the audit
// log's (which writes its policy into Dir), then extraFlags.
func (c *Cluster) componentFlags(opts Options) (map[string][]string, error) {
	flags := extraFlags(opts)
	if opts.AuditLog {
		audit, err := c.auditArgs()
		if err != nil {
			return nil, err
		}
		flags[APIServer] = append(audit, flags[APIServer]...)
	}
	return flags, nil
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
	var node *nodeTeardown
	if c.nodeState != nil {
		// First, while the kube-apiserver still runs: kubelet stops its pods.
		node = c.nodeTeardown()
		node.stopProcesses()
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		t0 := time.Now()
		if err := stopPID(c.procs[i].name, c.procs[i].pid, c.procs[i].done); err != nil {
			errs = append(errs, err)
		}
		if d := time.Since(t0); d > time.Second {
			fmt.Fprintf(c.log, "cluster: %s took %s to stop\n", c.procs[i].name, d.Round(time.Millisecond))
		}
	}
	if node != nil {
		// The host last: the kube-apiserver listened on the node's bridge.
		if err := node.undoHost(); err != nil {
			errs = append(errs, err)
		}
		c.nodeState, c.Node = nil, nil
	}
	if err := c.nodeLock.release(); err != nil {
		errs = append(errs, err)
	}
	c.nodeLock = nil
	// Keep a failed start's logs for inspection; the error names the dir.
	if removeDir && c.tempDir && len(errs) == 0 {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
