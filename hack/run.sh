#!/usr/bin/env bash
# `make run`: the operator on a cluster with the user's sample applied.
# Uses $KUBECONFIG when it reaches a cluster: then nothing but the operator
# (make build) and hack/runctl are built, and no kubectl is needed. Otherwise
# builds the local control plane (hack/tools, cached; what `make tools`
# builds) and starts (or reuses) the local cluster: as root with a real node
# (profile node), where the page is then fetched from a pod and printed. Runs the operator in
# the foreground; Ctrl-C stops it (the local cluster keeps running: `make
# cluster-down`).
# The operator runs with leader election in simplewebapp-system, so that
# against a cluster that already runs the operator it stands by instead of
# becoming a second writer.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SWA_BIN_DIR:?set by make}" "${BIN:?set by make}"
export SWA_BIN_DIR

# hack/runctl does the cluster side (reach, CRD, namespace, sample, wait)
# with client-go, built here once (seconds on a warm Go cache).
work=$(mktemp -d -t simplewebapp-run.XXXXXX)
trap 'rm -rf "$work"' EXIT
go build -o "$work/runctl" ./hack/runctl
runctl=$work/runctl

if [[ -n "${KUBECONFIG:-}" ]] && where=$("$runctl" cluster 2>"$work/reach"); then
	kc=$KUBECONFIG
	local_cluster=
	echo "Using the cluster of KUBECONFIG=$kc: $where"
else
	[[ -n "${KUBECONFIG:-}" ]] && echo "KUBECONFIG=$KUBECONFIG reaches no cluster ($(<"$work/reach")); using the local one."
	# The control plane binaries: cached after the first build (about a
	# quarter of an hour on 2 cores).
	bash hack/tools/build.sh >/dev/null
	bash hack/tools/build-metrics-server.sh >/dev/null
	# As root, the local cluster gets a real node (kubelet, containerd): the
	# pods are real containers of the web server's local stand-in image
	# (hack/image -web-standin), and the page can be fetched. Without root,
	# kwok's simulated nodes run nothing that serves.
	up=(--profile full)
	if [[ $(id -u) == 0 ]]; then
		bash hack/tools/node-deps.sh
		bash hack/tools/build-node.sh >/dev/null
		go run ./hack/image -web-standin -o "$work/web.oci.tar" >/dev/null
		up=(--profile node --node-image "$work/web.oci.tar")
	else
		echo "Not root: the local cluster's nodes are kwok's simulation (no container runs, no page to fetch); as root it gets a real node."
	fi
	if ! go run ./hack/localcluster status >/dev/null 2>&1; then
		go run ./hack/localcluster up "${up[@]}" >/dev/null
	fi
	kc=$(go run ./hack/localcluster kubeconfig)
	local_cluster=1
	where=$(KUBECONFIG=$kc "$runctl" cluster)
	echo "Using the local cluster: KUBECONFIG=$kc: $where"
fi
export KUBECONFIG=$kc

ns=simplewebapp-system
"$runctl" setup -crds config/crd/bases -namespace "$ns" -sample config/samples/my-webapp.yaml

log=$(mktemp -t simplewebapp-operator.XXXXXX.log)
"$BIN" --metrics-bind-address=0 --health-probe-bind-address=127.0.0.1:0 \
	--leader-elect --leader-election-namespace="$ns" >"$log" 2>&1 &
op=$!
trap 'kill $op 2>/dev/null || true; wait $op 2>/dev/null || true; rm -rf "$work"; echo; echo "operator stopped; its log: $log"' EXIT
echo "operator running (pid $op), log: $log"

if ! "$runctl" wait -name my-webapp -timeout 120s; then
	tail -n 30 "$log"
	exit 1
fi
# The page as a client in the cluster gets it: from a pod on the real node,
# through the Service (only a local cluster with a real node has the image).
fetch=
if [[ -n $local_cluster ]] && "$SWA_BIN_DIR/kubectl" --kubeconfig "$kc" get node swa-real-node >/dev/null 2>&1; then
	echo
	"$runctl" fetch -service my-webapp-web -image registry.local/swa/swa-node-test:1.0 -node swa-real-node
	echo
	ip=$("$SWA_BIN_DIR/kubectl" --kubeconfig "$kc" get service -n default my-webapp-web -o 'jsonpath={.spec.clusterIP}')
	fetch="  k run -n default fetch --rm -i --restart=Never --image=registry.local/swa/swa-node-test:1.0 --image-pull-policy=Never -- -get http://$ip/   # the page, from a pod
"
fi
if grep -qi "successfully acquired lease" "$log"; then
	echo "This operator (pid $op) is the leader: it reconciles."
else
	holder=$("$runctl" holder -namespace "$ns" -name simplewebapp-operator.example.com 2>/dev/null || true)
	echo "This operator (pid $op) is on standby: ${holder:-another operator} holds the Lease $ns/simplewebapp-operator.example.com and reconciles; this one takes over when it goes."
fi

# The kubectl to suggest: the local cluster's (built with it), else yours.
kubectl=kubectl note=
if [[ -n $local_cluster ]]; then
	kubectl=$SWA_BIN_DIR/kubectl
	note="; \`make cluster-down\` stops the local cluster"
elif ! command -v kubectl >/dev/null; then
	echo "(There is no kubectl on your PATH; the commands below need one.)"
fi
if [[ $kc == *:* ]]; then k="KUBECONFIG=$kc $kubectl"; else k="$kubectl --kubeconfig $kc"; fi
cat <<MSG

my-webapp is Ready. In another terminal:
  alias k='$k'
  k get swa -n default -w
  k apply -n default -f config/samples/my-webapp-updated.yaml   # 5 replicas, new message
$fetch  k delete -n default pod -l app.kubernetes.io/instance=my-webapp --wait=false   # they come back
  k delete -n default swa my-webapp                              # everything goes
Ctrl-C stops the operator$note.
MSG
trap 'kill $op 2>/dev/null || true' INT TERM # Ctrl-C: stop the operator, exit 0
wait $op || true
