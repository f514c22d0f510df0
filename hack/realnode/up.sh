#!/usr/bin/env bash
# Starts a real node on this machine, joined to the running local cluster
# (go run ./hack/localcluster up, profile full): containerd 2.x with runc and
# the CNI bridge, a kubelet registering node swa-real-node, and with --proxy
# MODE (iptables|nftables) kube-proxy. Needs root. Stop with down.sh, which
# undoes everything (it also runs when this script fails half-way).
#
#   hack/realnode/up.sh [--proxy iptables|nftables]
#
# Env: SWA_CLUSTER_DIR (default: the dir localcluster recorded), SWA_BIN_DIR
# (control-plane bin dir, for kubectl), SWA_REAL_NODE_DIR (state, default
# /tmp/swa-real-node). The node's binaries come from hack/realnode/build.sh.
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

proxy_mode=""
while [[ $# -gt 0 ]]; do
	case $1 in
	--proxy) proxy_mode=$2; shift 2 ;;
	*) echo "usage: $0 [--proxy iptables|nftables]" >&2; exit 2 ;;
	esac
done
[[ $(id -u) == 0 ]] || { echo "up.sh needs root" >&2; exit 1; }

t_start=$(ts)
BIN=$(node_bin)
for b in kubelet containerd containerd-shim-runc-v2 ctr runc pause swa-node-test mkimage cni/bridge cni/host-local cni/loopback cni/portmap; do
	[[ -x $BIN/$b ]] || { echo "missing $BIN/$b: run hack/realnode/build.sh" >&2; exit 1; }
done
[[ -z $proxy_mode || -x $BIN/kube-proxy ]] || { echo "missing $BIN/kube-proxy" >&2; exit 1; }
KUBECTL=$(cp_bin)/kubectl
CDIR=$(cluster_dir)
[[ -f $CDIR/ca.key && -f $CDIR/admin.kubeconfig ]] || { echo "no CA/admin kubeconfig in cluster dir $CDIR" >&2; exit 1; }
export KUBECONFIG=$CDIR/admin.kubeconfig
"$KUBECTL" get --raw /readyz >/dev/null || { echo "the local cluster's apiserver is not ready" >&2; exit 1; }
for t in ip nft iptables openssl; do command -v $t >/dev/null || { echo "needs $t (apt-get install iproute2 nftables iptables openssl)" >&2; exit 1; }; done

if [[ -e $S ]]; then
	echo "$S exists: a real node is up or was not cleaned up; run hack/realnode/down.sh first" >&2
	exit 1
fi
if ip link show "$BRIDGE" >/dev/null 2>&1; then
	echo "bridge $BRIDGE exists: another real node? run down.sh" >&2
	exit 1
fi
mkdir -p "$S"/{baseline,pids,logs,images,pki,cni/net.d,cni/ipam,containerd,kubelet,kube-proxy,pod-logs}
# From here on a failure undoes what was done.
undo_on_failure() {
	local rc=$?
	[[ $rc == 0 ]] && return
	say "up failed (exit $rc); logs in $S/logs; cleaning up"
	cp -r "$S/logs" "/tmp/swa-real-node-failed-logs.$$" 2>/dev/null || true
	bash "$here/down.sh" || true
	say "logs kept in /tmp/swa-real-node-failed-logs.$$"
}
trap undo_on_failure EXIT

# --- baseline: what down.sh restores and compares with ------------------------
for k in "${SYSCTLS[@]}"; do
	v=$(sysctl -n "$k" 2>/dev/null) && printf '%s=%s\n' "$k" "$v"
done >"$S/baseline/sysctl.conf"
sysctl -a 2>/dev/null | sort >"$S/baseline/sysctl-all.txt" || true
iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' >"$S/baseline/iptables.txt" || true
ip6tables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' >"$S/baseline/ip6tables.txt" || true
nft list tables >"$S/baseline/nft-tables.txt"
for p in "${FIXED_PATHS[@]}"; do [[ -e $p ]] && echo "$p"; done >"$S/baseline/paths-existing.txt" || true
findmnt -rn -o TARGET | sort >"$S/baseline/mounts.txt"
ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort >"$S/baseline/links.txt"
echo "$NODE" >"$S/node-name"
echo "$CDIR" >"$S/cluster-dir"

# --- images: pause (sandbox) and the test server as OCI archives --------------
"$BIN/mkimage" -bin "$BIN/pause" -ref "$PAUSE_IMAGE" -o "$S/images/pause.tar" >/dev/null
"$BIN/mkimage" -bin "$BIN/swa-node-test" -ref "$TEST_IMAGE" -o "$S/images/swa-node-test.tar" >/dev/null

# --- cgroups: /$CGROUP in every hierarchy (kubelet's cgroupRoot must exist);
# containerd, its shims and kubelet run in /$CGROUP/runtime so down.sh finds
# every process it must stop there.
for d in $(cgroup_dirs); do
	for sub in "$CGROUP" "$CGROUP/runtime"; do
		mkdir -p "$d/$sub"
		if [[ -f $d/$sub/cpuset.cpus ]]; then # v1 cpuset: a new group starts empty
			cat "$(dirname "$d/$sub")/cpuset.cpus" >"$d/$sub/cpuset.cpus"
			cat "$(dirname "$d/$sub")/cpuset.mems" >"$d/$sub/cpuset.mems"
		fi
	done
done
# run_in_cgroup LOG PIDFILE CMD...: starts CMD detached, in its own process
# group (a Ctrl-C in this terminal does not reach it), in /$CGROUP/runtime of
# every hierarchy, and records its pid.
run_in_cgroup() {
	local logf=$1 pidf=$2 procs=() d
	shift 2
	for d in $(cgroup_dirs); do procs+=("$d/$CGROUP/runtime/cgroup.procs"); done
	# shellcheck disable=SC2016 # the inner bash expands these
	setsid bash -c 'n=$1; shift; for ((i = 0; i < n; i++)); do echo $$ >"$1"; shift; done; exec "$@"' _ \
		"${#procs[@]}" "${procs[@]}" "$@" </dev/null >>"$logf" 2>&1 &
	echo $! >"$pidf"
}

# --- network: the bridge with the gateway address (kubelet's node IP must
# exist before the first pod), and a forward guard: nothing is forwarded
# between the bridge and any other interface (pods get no route off the
# machine; the CNI config has no masquerade and no default route either).
ip link add "$BRIDGE" type bridge
ip addr add "$GW/${POD_CIDR#*/}" dev "$BRIDGE"
ip link set "$BRIDGE" up
nft -f - <<EOF
table inet $NFT_TABLE {
	chain forward {
		type filter hook forward priority -10; policy accept;
		iifname "$BRIDGE" oifname != "$BRIDGE" counter drop
		iifname != "$BRIDGE" oifname "$BRIDGE" counter drop
	}
}
EOF
sysctl -qw net.ipv4.ip_forward=1 # service traffic from pods is routed back onto the bridge

SERVICE_CIDR=$("$KUBECTL" get servicecidr kubernetes -o jsonpath='{.spec.cidrs[0]}' 2>/dev/null || true)
SERVICE_CIDR=${SERVICE_CIDR:-10.0.0.0/16}
echo "$SERVICE_CIDR" >"$S/service-cidr"
cat >"$S/cni/net.d/10-$CNI_NET.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$S/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "${GW%.*}.10", "rangeEnd": "${GW%.*}.200", "gateway": "$GW"}]],
        "routes": [{"dst": "$SERVICE_CIDR", "gw": "$GW"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

# --- containerd ----------------------------------------------------------------
C=$S/containerd
mkdir -p "$C/tmp"
# Without CAP_SYS_RESOURCE in the bounding set (this VM kind drops it) no process
# may lower its oom_score_adj, so runc fails the pod sandbox (kubelet asks for
# -998): "nsexec: failed to update /proc/self/oom_score_adj: Permission denied".
# Then containerd clamps every requested value to its own (0), and kubelet
# leaves its own score alone.
restrict_oom=false
if (( ! ($(awk '/^CapBnd:/ {print "0x" $2}' /proc/self/status) >> 24 & 1) )); then
	restrict_oom=true
	say "no CAP_SYS_RESOURCE: containerd restrict_oom_score_adj = true, kubelet oomScoreAdj: 0"
fi
cat >"$C/config.toml" <<EOF
version = 4
root = "$C/root"
state = "$C/state"
temp = "$C/tmp"
imports = []

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = "$C/containerd.sock"
  [plugins.'io.containerd.server.v1.ttrpc']
    address = "$C/containerd.sock.ttrpc"
  # Shim sockets here, not in /run/containerd/s.
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "$C/s"
  [plugins.'io.containerd.internal.v1.opt']
    path = "$C/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = $restrict_oom
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$BIN/runc"
          Root = "$C/runc"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$BIN/cni"]
      conf_dir = "$S/cni/net.d"
EOF
t0=$(ts)
run_in_cgroup "$S/logs/containerd.log" "$S/pids/containerd" env PATH="$BIN:$PATH" "$BIN/containerd" --config "$C/config.toml"
CTR=("$BIN/ctr" --address "$C/containerd.sock" --namespace k8s.io)
for _ in $(seq 1 100); do
	"${CTR[@]}" version >/dev/null 2>&1 && break
	pid_alive "$(cat "$S/pids/containerd")" || { tail -20 "$S/logs/containerd.log" >&2; exit 1; }
	sleep 0.2
done
"${CTR[@]}" version >/dev/null
say "containerd $("${CTR[@]}" version 2>/dev/null | awk '/Server:/{s=1} s && /Version:/{print $2; exit}') up in $(elapsed "$t0") (pid $(cat "$S/pids/containerd"))"
for img in pause swa-node-test; do
	"${CTR[@]}" images import "$S/images/$img.tar" >>"$S/logs/ctr-import.log" 2>&1
done
"${CTR[@]}" images ls -q 2>/dev/null | grep -v '^sha256:' | sed 's/^/[realnode] image: /' >&2

# --- the node's client certificate (Node authorizer: system:node:<name> in
# system:nodes), signed with the cluster CA; kube-proxy's as system:kube-proxy
# (bound to system:node-proxier by default RBAC).
server=$(awk '/server:/ {print $2; exit}' "$CDIR/admin.kubeconfig")
sign() { # sign NAME SUBJECT
	openssl ecparam -name prime256v1 -genkey -noout -out "$S/pki/$1.key" 2>/dev/null
	openssl req -new -key "$S/pki/$1.key" -subj "$2" -out "$S/pki/$1.csr" 2>/dev/null
	openssl x509 -req -in "$S/pki/$1.csr" -CA "$CDIR/ca.crt" -CAkey "$CDIR/ca.key" \
		-set_serial "0x$(openssl rand -hex 8)" -days 7 -sha256 \
		-extfile <(printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n') \
		-out "$S/pki/$1.crt" 2>/dev/null
	cat >"$S/pki/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority: $CDIR/ca.crt
users:
- name: $1
  user:
    client-certificate: $S/pki/$1.crt
    client-key: $S/pki/$1.key
contexts:
- name: $1
  context: {cluster: local, user: $1}
current-context: $1
EOF
}
sign kubelet "/O=system:nodes/CN=system:node:$NODE"

# --- kubelet -----------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
K=$S/kubelet
kubelet_port=$(free_port)
healthz_port=$(free_port)
cat >"$K/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 on this machine kind: kubelet >= 1.35 refuses it unless told.
failCgroupV1: false
# containerd reports its driver (runc SystemdCgroup=false -> cgroupfs); kubelet
# must agree. No systemd here anyway.
cgroupDriver: cgroupfs
# Everything kubelet makes under one cgroup subtree that up.sh created and
# down.sh removes: /$CGROUP/kubepods/...
cgroupRoot: /$CGROUP
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
containerRuntimeEndpoint: unix://$C/containerd.sock
podLogsDir: $S/pod-logs
volumePluginDir: $K/volume-plugins
# The kubelet API on the bridge address only (the node IP; the apiserver
# reaches it for logs/exec: it presents no client certificate here, hence
# anonymous + AlwaysAllow; nothing off the machine can reach it).
address: $GW
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: $CDIR/ca.crt}
authorization: {mode: AlwaysAllow}
# Local images only: never garbage-collect them (100 disables image GC), and no
# disk-pressure evictions on a shared disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
# Only pods that tolerate it (or name the node) land here.
registerWithTaints:
- {key: "$LABEL", value: "true", effect: NoSchedule}
maxPods: 30
clusterDomain: cluster.local
resolvConf: ""
serializeImagePulls: false
EOF
if $restrict_oom; then echo "oomScoreAdj: 0" >>"$K/config.yaml"; fi
t0=$(ts)
run_in_cgroup "$S/logs/kubelet.log" "$S/pids/kubelet" "$BIN/kubelet" \
	--config="$K/config.yaml" --kubeconfig="$S/pki/kubelet.kubeconfig" --root-dir="$K/root" \
	--hostname-override="$NODE" --node-ip="$GW" --node-labels="$LABEL=true" --v=2
say "kubelet started (pid $(cat "$S/pids/kubelet"), API $GW:$kubelet_port); waiting for node $NODE Ready"
for _ in $(seq 1 240); do
	st=$("$KUBECTL" get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
	[[ $st == True ]] && break
	pid_alive "$(cat "$S/pids/kubelet")" || { say "kubelet exited:"; tail -30 "$S/logs/kubelet.log" >&2; exit 1; }
	sleep 0.5
done
[[ $st == True ]] || { say "node not Ready after 120s"; tail -30 "$S/logs/kubelet.log" >&2; exit 1; }
say "node $NODE Ready $(elapsed "$t0") after kubelet start"

# --- kube-proxy (optional) -------------------------------------------------------
if [[ -n $proxy_mode ]]; then
	sign kube-proxy "/CN=system:kube-proxy"
	cat >"$S/kube-proxy/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: $proxy_mode
clientConnection: {kubeconfig: $S/pki/kube-proxy.kubeconfig}
hostnameOverride: $NODE
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:$(free_port)
metricsBindAddress: 127.0.0.1:$(free_port)
# NodePorts only on the bridge (no route_localnet, nothing on eth0).
nodePortAddresses: ["$POD_CIDR"]
# 0: leave the host's conntrack settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
	t0=$(ts)
	run_in_cgroup "$S/logs/kube-proxy.log" "$S/pids/kube-proxy" "$BIN/kube-proxy" --config="$S/kube-proxy/config.yaml" --v=2
	echo "$proxy_mode" >"$S/kube-proxy/mode"
	sleep 3
	pid_alive "$(cat "$S/pids/kube-proxy")" || { say "kube-proxy exited:"; tail -30 "$S/logs/kube-proxy.log" >&2; exit 1; }
	say "kube-proxy ($proxy_mode) running (pid $(cat "$S/pids/kube-proxy"))"
fi

trap - EXIT
cat >&2 <<EOF
[realnode] node $NODE up in $(elapsed "$t_start"): state $S, logs $S/logs
[realnode]   pods: nodeName: $NODE, or nodeSelector $LABEL=true + toleration $LABEL=true:NoSchedule
[realnode]   images: $PAUSE_IMAGE (sandbox), $TEST_IMAGE (imagePullPolicy: IfNotPresent)
[realnode]   ctr: $BIN/ctr --address $C/containerd.sock -n k8s.io ...
[realnode]   stop: hack/realnode/down.sh
EOF
