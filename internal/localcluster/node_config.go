package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// writeConfigs writes containerd's config and the CNI network into the
// node's state directory.
func (n *RealNode) writeConfigs(restrictOOM bool) error {
	for _, d := range []string{"containerd/tmp", "cni/net.d", "cni/ipam", "kubelet", "kube-proxy", "pod-logs", "images"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(n.path("containerd", "config.toml"), []byte(containerdConfig(n, restrictOOM)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(n.path("cni", "net.d", "10-"+nodeCNINet+".conflist"), []byte(cniConfig(n)), 0o644)
}

// containerdConfig keeps everything of containerd under the state directory:
// root, state, sockets (the shims' too, else /run/containerd/s), the opt
// plugin, the pods' netns mounts and runc's state. NRI and the CDI spec dirs
// are off: nothing here uses them, and they would read host paths.
func containerdConfig(n *RealNode, restrictOOM bool) string {
	c := n.path("containerd")
	return fmt.Sprintf(`version = 4
root = %[1]q
state = %[2]q
temp = %[3]q
imports = []

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = %[4]q
  [plugins.'io.containerd.server.v1.ttrpc']
    address = %[5]q
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = %[6]q
  [plugins.'io.containerd.internal.v1.opt']
    path = %[7]q
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[8]q
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = %[9]t
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[10]q
          Root = %[11]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[12]q]
      conf_dir = %[13]q
`, filepath.Join(c, "root"), filepath.Join(c, "state"), filepath.Join(c, "tmp"),
		n.containerdSocket(), n.containerdSocket()+".ttrpc", filepath.Join(c, "s"), filepath.Join(c, "opt"),
		realNodePauseImage, restrictOOM, filepath.Join(n.BinDir, "runc"), filepath.Join(c, "runc"),
		filepath.Join(n.BinDir, "cni"), n.path("cni", "net.d"))
}

func (n *RealNode) containerdSocket() string { return n.path("containerd", "containerd.sock") }

// cniConfig is the pods' network: the bridge with the node IP as gateway, no
// masquerade and no default route: pods reach each other, the node and
// (through kube-proxy) the Services, nothing off the machine.
func cniConfig(n *RealNode) string {
	base := nodeIP[:strings.LastIndexByte(nodeIP, '.')]
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "rangeStart": "%s.10", "rangeEnd": "%s.200", "gateway": %q}]],
        "routes": [{"dst": %q, "gw": %q}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, nodeCNINet, nodeBridge, n.path("cni", "ipam"), nodePodCIDR, base, base, n.IP, n.serviceCIDR, n.IP)
}

// kubeletConfig is kubelet's configuration: its API and serving certificate
// on the node IP only, everything it creates under the state directory and
// the node's cgroup, no image garbage collection (images are only imported).
func kubeletConfig(n *RealNode, np *nodePKI, port, healthzPort int, taint, restrictOOM bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# kubelet >= 1.35 refuses cgroup v1 unless told.
failCgroupV1: false
# containerd reports its driver (runc SystemdCgroup = false: cgroupfs).
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
volumePluginDir: %s
# The API only on the node IP. The kube-apiserver presents no client
# certificate: anonymous requests with AlwaysAllow, reachable from this
# machine only.
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
# Images are imported, never pulled: no image garbage collection (100), and
# no disk-pressure evictions on a shared disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
maxPods: 30
clusterDomain: cluster.local
resolvConf: ""
serializeImagePulls: false
`, nodeCgroup, n.containerdSocket(), n.path("pod-logs"), n.path("kubelet", "volume-plugins"),
		n.IP, port, healthzPort, np.serving.certFile, np.serving.keyFile, np.caFile)
	if taint {
		fmt.Fprintf(&b, "registerWithTaints:\n- {key: %q, value: \"true\", effect: NoSchedule}\n", RealNodeLabel)
	}
	if restrictOOM {
		b.WriteString("oomScoreAdj: 0\n")
	}
	return b.String()
}

// kubeProxyConfig is kube-proxy's configuration: nftables, NodePorts only
// on the pod range (no route_localnet, nothing on the host's interfaces),
// and conntrack values 0, which leave the host's settings alone.
func kubeProxyConfig(n *RealNode, healthzPort, metricsPort int) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
nodePortAddresses: [%q]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, n.path("kube-proxy.kubeconfig"), n.Name, nodePodCIDR, healthzPort, metricsPort, nodePodCIDR)
}

// writeKubeconfigs writes the kubeconfigs of kubelet and kube-proxy.
func (n *RealNode) writeKubeconfigs(server string, ca *keyPair, np *nodePKI) error {
	if err := writeKubeconfig(n.path("kubelet.kubeconfig"), server, ca, np.kubelet); err != nil {
		return err
	}
	return writeKubeconfig(n.path("kube-proxy.kubeconfig"), server, ca, np.kubeProxy)
}
