package localcluster

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// Options configure Start.
type Options struct {
	Profile string // ProfileAPI, ProfileFull (default) or ProfileNode
	// Nodes is the number of kwok (fake) nodes: default 3 for ProfileFull,
	// 0 for ProfileNode (then the real node is the only one, and untainted).
	Nodes  int
	BinDir string // default BinDir()
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
	// tests judge what a client wrote from it (internal/testkit ReadAudit).
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
	// NodeBinDir: the real node's binaries; default NodeBinDir()
	// (hack/tools/build-node.sh --print).
	NodeBinDir string
	// NodeImages: OCI image archives imported into the real node's
	// containerd at start, besides the pause and test images.
	NodeImages []string
	// APIServerArgs are more kube-apiserver flags, e.g. an audit policy
	// (hack/bench counts requests by user from the audit log).
	APIServerArgs []string
}

// DefaultServiceCIDR is the Service IP range unless Options.ServiceCIDR says
// otherwise. kube-apiserver refuses IPv4 ranges larger than a /12.
const DefaultServiceCIDR = "10.0.0.0/16"

// withDefaults checks opts and fills in the defaults of unset fields. It may
// run hack/tools/build.sh (through BinDir) when BinDir is unset.
func withDefaults(opts Options) (Options, error) {
	if opts.Profile == "" {
		opts.Profile = ProfileFull
	}
	if opts.Profile != ProfileAPI && opts.Profile != ProfileFull && opts.Profile != ProfileNode {
		return opts, fmt.Errorf("unknown profile %q (want %q, %q or %q)", opts.Profile, ProfileAPI, ProfileFull, ProfileNode)
	}
	if opts.Metrics && opts.Profile == ProfileAPI {
		return opts, fmt.Errorf("Options.Metrics needs profile %q or %q (controllers, nodes)", ProfileFull, ProfileNode)
	}
	switch {
	case opts.Profile == ProfileNode && opts.Nodes < 0:
		opts.Nodes = 0
	case opts.Profile != ProfileNode && opts.Nodes <= 0:
		opts.Nodes = 3
	}
	if opts.Profile == ProfileNode && opts.NodeBinDir == "" {
		var err error
		if opts.NodeBinDir, err = NodeBinDir(); err != nil {
			return opts, err
		}
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
		var err error
		if opts.BinDir, err = BinDir(); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// logWriter is where Start reports progress before withDefaults has run.
func logWriter(opts Options) io.Writer {
	if opts.LogWriter == nil {
		return io.Discard
	}
	return opts.LogWriter
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
