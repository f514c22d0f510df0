# shellcheck shell=bash disable=SC2034 # sourced: the scripts that source it use these names
# Shared settings of hack/realnode/{up,down,demo}.sh (sourced, not run).
# One real node per machine: the bridge, the cgroup and the state directory
# have fixed names.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

NODE=${SWA_REAL_NODE_NAME:-swa-real-node}
S=${SWA_REAL_NODE_DIR:-/tmp/swa-real-node} # state: configs, logs, runtime roots
BRIDGE=swa-br0
CGROUP=swa-real-node          # kubelet cgroupRoot, and containerd + shims under $CGROUP/runtime
POD_CIDR=10.99.0.0/24         # host-local range on the bridge; kwok uses 10.244.0.0/16
GW=10.99.0.1                  # the bridge's address: node IP and the pods' gateway
NFT_TABLE=swa_real_node       # inet table: pods get no forwarding off the bridge
CNI_NET=swa-real-node         # CNI network name (cache files in /var/lib/cni are named by it)
LABEL=swa.example.com/real-node
PAUSE_IMAGE=registry.local/swa/pause:1.0
TEST_IMAGE=registry.local/swa/swa-node-test:1.0

# Sysctls that kubelet (kernel.panic, kernel.panic_on_oops, vm.overcommit_memory,
# vm.panic_on_oom, kernel.keys.*), the CNI bridge plugin (ip_forward) and
# kube-proxy (route_localnet, conntrack) may change: recorded by up.sh, restored
# by down.sh. ip_forward first: setting it resets the per-interface forwarding.
SYSCTLS=(
	net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv6.conf.all.forwarding
	kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes
	net.ipv4.conf.all.route_localnet
	net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
	net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
	net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal
)

# Paths outside $S that the runtime or kubelet create with fixed names:
# /run/containerd/s (shim sockets, fixed in containerd), /var/lib/cni (libcni's
# result cache), /var/log/containers (kubelet's legacy log symlinks), /run/mount
# (util-linux libmount's utab directory: any mount/umount call creates it),
# /run/netns (`ip netns add` of demo.sh bind-mounts it on itself).
# Order matters: umount of /run/netns creates /run/mount again.
FIXED_PATHS=(/run/containerd /var/lib/cni /var/log/containers /run/netns /run/mount)

node_bin() { bash "$here/build.sh" --print; }
cp_bin() { echo "${SWA_BIN_DIR:-$(bash "$repo/hack/tools/build.sh" --print)}"; }

# The local cluster's state dir: $SWA_CLUSTER_DIR, or the one `localcluster up`
# recorded.
cluster_dir() {
	if [[ -n "${SWA_CLUSTER_DIR:-}" ]]; then
		echo "$SWA_CLUSTER_DIR"
		return
	fi
	local f=${XDG_CACHE_HOME:-$HOME/.cache}/simplewebapp-operator/local-cluster/state-dir
	[[ -f $f ]] || { echo "no local cluster: start one (go run ./hack/localcluster up) or set SWA_CLUSTER_DIR" >&2; return 1; }
	cat "$f"
}

cgroup_dirs() {
	local d
	for d in /sys/fs/cgroup/*/; do
		d=${d%/}
		[[ -f $d/cgroup.procs ]] && echo "$d"
	done
	[[ -f /sys/fs/cgroup/cgroup.procs ]] && echo /sys/fs/cgroup
	return 0
}

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

ts() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(ts)" 'BEGIN { printf "%.1fs", b - a }'; }
say() { printf '[realnode %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
