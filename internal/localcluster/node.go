package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ProfileNode is ProfileFull plus one real node: kubelet, containerd with
// runc, the CNI bridge and kube-proxy (nftables) on this machine. It needs
// root and the binaries of hack/tools/build-node.sh; without them Start falls
// back to ProfileFull with kwok nodes (docs/real-node.md).
const ProfileNode = "node"

// Components of the real node (and their binaries' names).
const (
	Containerd = "containerd"
	Kubelet    = "kubelet"
	KubeProxy  = "kube-proxy"
)

// The real node is a machine-wide singleton: these names are fixed, and the
// node lock (node_lock.go) keeps a second real node from starting.
const (
	// RealNodeName is the real node's Node name.
	RealNodeName = "swa-real-node"
	// RealNodeLabel is set to "true" on the real node; with kwok nodes in the
	// cluster it is also a NoSchedule taint, so pods land there only when
	// they tolerate it (or name the node).
	RealNodeLabel = "swa.example.com/real-node"
	// RealNodeTestImage is always in the node's containerd: swa-node-test,
	// an HTTP server on :8080 (-message TEXT), or -exit N, or -get URL.
	// Use imagePullPolicy IfNotPresent or Never: nothing is pulled.
	RealNodeTestImage = "registry.local/swa/swa-node-test:1.0"
	// realNodePauseImage is the pod sandbox image.
	realNodePauseImage = "registry.local/swa/pause:1.0"

	// nodeStateDir holds the node's configuration, runtime roots and host
	// baseline. Fixed and short: containerd's shim sockets are
	// <socket_dir>/<64 hex digits> and a unix socket path has 107 bytes.
	nodeStateDir = "/tmp/swa-real-node"
	nodeBridge   = "swa-br0"
	// nodeCgroup is kubelet's cgroupRoot in every hierarchy; containerd,
	// its shims, kubelet and kube-proxy run in nodeCgroup/runtime, so that
	// teardown finds every process of the node there.
	nodeCgroup  = "swa-real-node"
	nodePodCIDR = "10.99.0.0/24" // kwok's pod IPs are 10.244.0.0/16
	nodeIP      = "10.99.0.1"    // the bridge: node InternalIP, pods' gateway, kube-apiserver's address
	nodeNftable = "swa_real_node"
	nodeCNINet  = "swa-real-node"
	// The client network namespace of RealNode.HTTPClient: a veth on the
	// bridge with this address.
	clientVeth = "swa-client0"
	clientIP   = "10.99.0.250"
)

// RealNode is the real node of a cluster started with ProfileNode.
type RealNode struct {
	Name   string // RealNodeName
	IP     string // the bridge address: the node's InternalIP, e.g. 10.99.0.1
	BinDir string // the node's binaries (Options.NodeBinDir)

	dir         string // nodeStateDir
	clusterDir  string // the Cluster's Dir: logs and pids file
	serviceCIDR string // routed from the pods and the client netns via the bridge
}

// NodeBinDir returns the directory with the real node's binaries:
// $SWA_NODE_BIN_DIR when set, else the cache directory of
// hack/tools/build-node.sh (it does not build: `make tools` does, as root).
func NodeBinDir() (string, error) {
	if d := os.Getenv("SWA_NODE_BIN_DIR"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "hack", "tools", "build-node.sh")
	out, err := exec.Command("bash", script, "--print").Output()
	if err != nil {
		return "", fmt.Errorf("%s --print: %w", script, err)
	}
	return lastLine(out), nil
}

// RealNodeStateDir returns the real node's state directory when the cluster
// whose state is in clusterDir has the real node, else "".
func RealNodeStateDir(clusterDir string) string {
	owner, err := os.ReadFile(filepath.Join(nodeStateDir, "cluster-dir"))
	if err != nil || strings.TrimSpace(string(owner)) != clusterDir {
		return ""
	}
	return nodeStateDir
}

// nodeBinaries are what the real node runs, relative to NodeBinDir.
var nodeBinaries = []string{Kubelet, KubeProxy, Containerd, "containerd-shim-runc-v2", "ctr", "runc",
	"cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap", "pause", "swa-node-test", "mkimage"}

// realNodeOrFallback returns opts unchanged unless they ask for ProfileNode
// where it cannot run (not root, no node binaries): then it says so on the
// log and returns ProfileFull with kwok nodes instead.
func realNodeOrFallback(opts Options) Options {
	if opts.Profile != ProfileNode {
		return opts
	}
	why := ""
	if os.Geteuid() != 0 {
		why = "real node needs root (running as uid " + strconv.Itoa(os.Geteuid()) + ")"
	} else {
		if opts.NodeBinDir == "" {
			d, err := NodeBinDir()
			if err != nil {
				why = "real node binaries: " + err.Error()
			}
			opts.NodeBinDir = d
		}
		for _, b := range nodeBinaries {
			if why != "" {
				break
			}
			if _, err := os.Stat(filepath.Join(opts.NodeBinDir, b)); err != nil {
				why = "real node needs " + b + " in " + opts.NodeBinDir + " (make tools as root builds it)"
			}
		}
	}
	if why == "" {
		return opts
	}
	fmt.Fprintf(logWriter(opts), "cluster: %s; falling back to kwok nodes (profile %s)\n", why, ProfileFull)
	opts.Profile = ProfileFull
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	return opts
}

// startNode starts the real node on the host prepared by prepareNode: its
// containerd with the images, the client netns, kubelet (until the Node is
// Ready) and kube-proxy (until it is healthy).
func (c *Cluster) startNode(ctx context.Context, opts Options, p *pki, client kubernetes.Interface) error {
	n := c.nodeState
	t0 := time.Now()
	restrictOOM := !hasCapSysResource()
	if restrictOOM {
		fmt.Fprintf(c.log, "cluster: no CAP_SYS_RESOURCE: containerd restrict_oom_score_adj, kubelet oomScoreAdj 0\n")
	}
	if err := n.writeConfigs(restrictOOM); err != nil {
		return err
	}
	if err := c.startContainerd(ctx, n); err != nil {
		return err
	}
	if err := n.importImages(ctx, opts.NodeImages); err != nil {
		return err
	}
	if err := n.createClientNetns(); err != nil {
		return fmt.Errorf("client netns: %w", err)
	}
	np, err := newNodePKI(n.dir, p.ca)
	if err != nil {
		return fmt.Errorf("node certificates: %w", err)
	}
	if err := n.writeKubeconfigs(c.restCfg.Host, p.ca, np); err != nil {
		return err
	}
	if err := c.startKubelet(ctx, n, np, client, opts.Nodes > 0, restrictOOM); err != nil {
		return err
	}
	if err := c.startKubeProxy(ctx, n); err != nil {
		return err
	}
	c.Node = n
	fmt.Fprintf(c.log, "cluster: real node %s up in %s (state %s)\n", n.Name, since(t0), n.dir)
	return nil
}

// startContainerd starts containerd in the node's cgroup and waits until it
// answers.
func (c *Cluster) startContainerd(ctx context.Context, n *RealNode) error {
	env := append(os.Environ(), "PATH="+n.BinDir+":"+os.Getenv("PATH")) // its shim
	if err := c.startNodeComponent(n, Containerd, env, "--config", n.path("containerd", "config.toml")); err != nil {
		return err
	}
	return c.waitComponent(ctx, Containerd, "containerd answers", 60*time.Second, func(ctx context.Context) (bool, error) {
		return n.ctr(ctx, "version") == nil, nil
	})
}

// startKubelet starts kubelet and waits until its Node is Ready. With kwok
// nodes the real node is tainted, so that they stay the default target.
func (c *Cluster) startKubelet(ctx context.Context, n *RealNode, np *nodePKI, client kubernetes.Interface, taint, restrictOOM bool) error {
	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	cfg := n.path("kubelet", "config.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig(n, np, ports[0], ports[1], taint, restrictOOM)), 0o644); err != nil {
		return err
	}
	if err := c.startNodeComponent(n, Kubelet, nil,
		"--config="+cfg, "--kubeconfig="+n.path("kubelet.kubeconfig"), "--root-dir="+n.path("kubelet", "root"),
		"--hostname-override="+n.Name, "--node-ip="+n.IP, "--node-labels="+RealNodeLabel+"=true", "--v=2",
	); err != nil {
		return err
	}
	return c.waitComponent(ctx, Kubelet, "node "+n.Name+" Ready", 120*time.Second, func(ctx context.Context) (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not registered yet
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// startKubeProxy starts kube-proxy (nftables) and waits for its /healthz,
// which answers 200 once it has programmed the Services.
func (c *Cluster) startKubeProxy(ctx context.Context, n *RealNode) error {
	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	cfg := n.path("kube-proxy", "config.yaml")
	if err := os.WriteFile(cfg, []byte(kubeProxyConfig(n, ports[0], ports[1])), 0o644); err != nil {
		return err
	}
	if err := c.startNodeComponent(n, KubeProxy, nil, "--config="+cfg, "--v=2"); err != nil {
		return err
	}
	plain := plainHTTPClient()
	url := "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/healthz"
	return c.waitComponent(ctx, KubeProxy, "kube-proxy /healthz", 60*time.Second, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, plain, url), nil
	})
}

// startNodeComponent starts one of the node's binaries in the node's
// cgroup, logging to Dir/<name>.log, and records it like every component.
func (c *Cluster) startNodeComponent(n *RealNode, name string, env []string, args ...string) error {
	p, err := startProcSpec(c.Dir, &proc{name: name, bin: filepath.Join(n.BinDir, name), args: args, env: env,
		cgroup: nodeCgroup + "/runtime"}, c.detach)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.PIDs[name] = p.pid
	return writePIDs(c.Dir, c.procs)
}

// path is a path in the node's state directory.
func (n *RealNode) path(elem ...string) string {
	return filepath.Join(append([]string{n.dir}, elem...)...)
}

// hasCapSysResource reports whether CAP_SYS_RESOURCE is in our bounding
// set. Without it no process may lower its oom_score_adj, and runc fails
// every sandbox that kubelet asks for -998.
func hasCapSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	const capSysResource = 24
	for _, line := range splitLines(string(b)) {
		var v uint64
		if _, err := fmt.Sscanf(line, "CapBnd:\t%x", &v); err == nil {
			return v&(1<<capSysResource) != 0
		}
	}
	return false
}

// CgroupRoot is the kubelet's cgroupRoot in every cgroup hierarchy: each
// container's cgroup, named by its ID, is below it.
func (n *RealNode) CgroupRoot() string { return nodeCgroup }
