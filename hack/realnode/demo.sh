#!/usr/bin/env bash
# The spike's proof on a node started by up.sh (needs root):
#  1. a Pod (nodeName: the real node) Running with a containerd:// ID, serving
#     HTTP on its pod IP: curl from the host and from a network namespace on
#     the bridge
#  2. a Deployment with 2 replicas; one container's process killed by PID on
#     the host; kubelet restarts it
#  3. a container that exits at start reaches CrashLoopBackOff
#  4. with kube-proxy up (up.sh --proxy MODE): a ClusterIP Service fetched from
#     the host and from the network namespace
# Leaves the namespace swa-realnode-demo and the netns swa-client behind for a
# look unless DEMO_CLEANUP=1 (down.sh removes the netns too).
set -euo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BIN=$(node_bin)
KUBECTL=$(cp_bin)/kubectl
KUBECONFIG=$(cat "$S/cluster-dir")/admin.kubeconfig
export KUBECONFIG
CTR=("$BIN/ctr" --address "$S/containerd/containerd.sock" --namespace k8s.io)
NS=swa-realnode-demo
k() { "$KUBECTL" -n "$NS" "$@"; }
step() { printf '\n=== %s\n' "$*"; }
# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds.
wait_for() {
	local secs=$1 what=$2 t0 deadline
	shift 2
	t0=$(ts)
	deadline=$(($(date +%s) + secs))
	while (($(date +%s) < deadline)); do
		if "$@" >/dev/null 2>&1; then echo "$what: after $(elapsed "$t0")"; return 0; fi
		sleep 0.2
	done
	echo "TIMEOUT ($secs s) waiting for: $what"
	return 1
}
phase_running() { [[ $(k get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.running.startedAt}') != "" ]]; }

# A fresh namespace each run.
"$KUBECTL" delete ns "$NS" --ignore-not-found --wait=true --timeout=120s >/dev/null
"$KUBECTL" create ns "$NS" >/dev/null
wait_for 30 "default ServiceAccount in $NS" k get sa default

step "1. a Pod on $NODE"
t0=$(ts)
k apply -f - <<EOF >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeName: $NODE
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: $TEST_IMAGE
    imagePullPolicy: IfNotPresent
    args: ["-message", "hello from a real container"]
    ports: [{containerPort: 8080}]
EOF
wait_for 120 "pod web Running (from create)" phase_running web
k get pod web -o wide
cid=$(k get pod web -o jsonpath='{.status.containerStatuses[0].containerID}')
ip=$(k get pod web -o jsonpath='{.status.podIP}')
echo "containerID: $cid"
echo "podIP: $ip"
echo "containerd task (host PID):"
"${CTR[@]}" tasks ls | grep -E "TASK|${cid#containerd://}"
echo "curl from the host:"
curl -sS --max-time 5 "http://$ip:8080/"
# A network namespace with a veth on the bridge, as a second pod would have.
if ! ip netns list | grep -qw swa-client; then
	ip netns add swa-client
	ip link add swa-client0 type veth peer name eth0 netns swa-client
	ip link set swa-client0 master "$BRIDGE" up
	ip -n swa-client addr add "${GW%.*}.250/${POD_CIDR#*/}" dev eth0
	ip -n swa-client link set eth0 up
	ip -n swa-client link set lo up
	ip -n swa-client route add "$(cat "$S/service-cidr")" via "$GW"
fi
echo "curl from netns swa-client (${GW%.*}.250):"
ip netns exec swa-client curl -sS --max-time 5 "http://$ip:8080/"
echo "no route off the machine from a pod's network: $(ip netns exec swa-client ip route get 1.1.1.1 2>&1 | head -1)"

step "2. a Deployment with 2 replicas; kill one container's process"
k apply -f - <<EOF >/dev/null
apiVersion: apps/v1
kind: Deployment
metadata: {name: web2}
spec:
  replicas: 2
  selector: {matchLabels: {app: web2}}
  template:
    metadata: {labels: {app: web2}}
    spec:
      nodeSelector: {$LABEL: "true"}
      tolerations: [{key: $LABEL, operator: Exists, effect: NoSchedule}]
      terminationGracePeriodSeconds: 2
      containers:
      - name: web
        image: $TEST_IMAGE
        imagePullPolicy: IfNotPresent
        args: ["-message", "hello from web2"]
        ports: [{containerPort: 8080}]
EOF
wait_for 120 "deployment web2 available (2/2)" bash -c "[[ \$('$KUBECTL' -n $NS get deploy web2 -o jsonpath='{.status.availableReplicas}') == 2 ]]"
k get pods -l app=web2 -o wide
victim=$(k get pods -l app=web2 -o jsonpath='{.items[0].metadata.name}')
vcid=$(k get pod "$victim" -o jsonpath='{.status.containerStatuses[0].containerID}')
vpid=$("${CTR[@]}" tasks ls | awk -v id="${vcid#containerd://}" '$1 == id {print $2}')
echo "killing $victim's container ${vcid#containerd://} (host PID $vpid: $(tr '\0' ' ' </proc/"$vpid"/cmdline)) with SIGKILL"
kill -KILL "$vpid"
restarted() {
	[[ $(k get pod "$victim" -o jsonpath='{.status.containerStatuses[0].restartCount}') -ge 1 ]] && phase_running "$victim"
}
wait_for 60 "kubelet restarted it (restartCount >= 1, running)" restarted
k get pod "$victim" -o jsonpath='{"restartCount: "}{.status.containerStatuses[0].restartCount}{"\nlastState: "}{.status.containerStatuses[0].lastState.terminated}{"\nnew containerID: "}{.status.containerStatuses[0].containerID}{"\n"}'
ip2=$(k get pod "$victim" -o jsonpath='{.status.podIP}')
echo "curl after the restart: $(curl -sS --max-time 5 "http://$ip2:8080/")"

step "3. a container that exits at start"
# kubelet 1.37 requeues a crash-looping pod only when its back-off expires, so
# the status shows waiting/CrashLoopBackOff only for a moment (at the start of
# the sync that restarts it; in between it shows the last terminated state,
# kubectl STATUS "Error"): watch the transitions instead of polling.
k delete pod crash --ignore-not-found --wait=true >/dev/null
watchlog=$(mktemp)
k get pods --field-selector metadata.name=crash -w -o jsonpath='{.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state}{"\n"}' >"$watchlog" 2>/dev/null &
watcher=$!
k apply -f - <<EOF >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: crash}
spec:
  nodeName: $NODE
  terminationGracePeriodSeconds: 1
  containers:
  - name: crash
    image: $TEST_IMAGE
    imagePullPolicy: IfNotPresent
    args: ["-exit", "3"]
EOF
wait_for 90 "pod crash in CrashLoopBackOff (seen by a watch)" grep -q '"reason":"CrashLoopBackOff"' "$watchlog" || true
kill "$watcher" 2>/dev/null || true
echo "status transitions seen by the watch (restartCount state):"
cut -c1-170 "$watchlog" | sed 's/^/  /'
rm -f "$watchlog"
k get pod crash -o wide
k get events --field-selector involvedObject.name=crash,reason=BackOff -o custom-columns=REASON:.reason,COUNT:.count,MESSAGE:.message
echo "kubectl logs crash (through the kubelet API):"
k logs crash 2>&1 | tail -2 || true

if [[ -f $S/kube-proxy/mode ]]; then
	step "4. a ClusterIP Service through kube-proxy ($(cat "$S/kube-proxy/mode") mode)"
	k apply -f - <<EOF >/dev/null
apiVersion: v1
kind: Service
metadata: {name: web2}
spec:
  selector: {app: web2}
  ports: [{port: 80, targetPort: 8080}]
EOF
	cip=$(k get svc web2 -o jsonpath='{.spec.clusterIP}')
	echo "clusterIP: $cip"
	wait_for 60 "service reachable from the host" curl -sS --max-time 2 "http://$cip/"
	for _ in 1 2 3 4; do echo "host -> $cip: $(curl -sS --max-time 5 "http://$cip/")"; done
	for _ in 1 2 3 4; do echo "netns swa-client -> $cip: $(ip netns exec swa-client curl -sS --max-time 5 "http://$cip/")"; done
	podA=$(k get pods -l app=web2 -o jsonpath='{.items[0].metadata.name}')
	echo "from inside pod $podA's network namespace (pod -> ClusterIP -> pod, hairpin included):"
	podcid=$(k get pod "$podA" -o jsonpath='{.status.containerStatuses[0].containerID}')
	ppid=$("${CTR[@]}" tasks ls | awk -v id="${podcid#containerd://}" '$1 == id {print $2}')
	for _ in 1 2 3 4; do echo "  $(nsenter --net=/proc/"$ppid"/ns/net curl -sS --max-time 5 "http://$cip/")"; done
fi

if [[ ${DEMO_CLEANUP:-0} == 1 ]]; then
	step "cleanup"
	"$KUBECTL" delete ns "$NS" --wait=true --timeout=90s
	ip netns del swa-client
fi
