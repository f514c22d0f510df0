#!/usr/bin/env bash
# `make run`: the operator on a cluster with the user's sample applied.
# Uses $KUBECONFIG when it reaches a cluster; otherwise starts (or reuses) the
# local full control plane. Runs the operator in the foreground; Ctrl-C stops
# it (the local cluster keeps running: `make cluster-down`).
# The operator runs with leader election in simplewebapp-system, so that
# against a cluster that already runs the operator it stands by instead of
# becoming a second writer.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SWA_BIN_DIR:?set by make}" "${BIN:?set by make}"
kubectl=$SWA_BIN_DIR/kubectl
export SWA_BIN_DIR

if [[ -n "${KUBECONFIG:-}" ]] && "$kubectl" get --raw /readyz >/dev/null 2>&1; then
	kc=$KUBECONFIG
	echo "Using the cluster of KUBECONFIG=$kc"
else
	[[ -n "${KUBECONFIG:-}" ]] && echo "KUBECONFIG=$KUBECONFIG reaches no cluster; using the local one."
	if ! go run ./hack/localcluster status >/dev/null 2>&1; then
		go run ./hack/localcluster up >/dev/null
	fi
	kc=$(go run ./hack/localcluster kubeconfig)
	echo "Using the local cluster: KUBECONFIG=$kc"
fi
k() { "$kubectl" --kubeconfig "$kc" "$@"; }

ns=simplewebapp-system
k apply --server-side -f config/crd/bases >/dev/null
k wait --for=condition=Established crd/simplewebapps.example.com --timeout=60s >/dev/null
k create namespace "$ns" --dry-run=client -o yaml | k apply --server-side --field-manager=simplewebapp-run -f - >/dev/null
k apply -n default -f config/samples/my-webapp.yaml

log=$(mktemp -t simplewebapp-operator.XXXXXX.log)
"$BIN" --kubeconfig "$kc" --metrics-bind-address=0 --health-probe-bind-address=127.0.0.1:0 \
	--leader-elect --leader-election-namespace="$ns" >"$log" 2>&1 &
op=$!
trap 'kill $op 2>/dev/null || true; wait $op 2>/dev/null || true; echo; echo "operator stopped; its log: $log"' EXIT
echo "operator running (pid $op), log: $log"

if ! k wait -n default --for=condition=Ready swa/my-webapp --timeout=120s; then
	tail -n 30 "$log"
	exit 1
fi
k get -n default swa,deploy,pods -l app.kubernetes.io/instance=my-webapp 2>/dev/null || true
k get -n default swa my-webapp
if grep -qi "successfully acquired lease" "$log"; then
	echo "This operator (pid $op) is the leader: it reconciles."
else
	holder=$(k -n "$ns" get lease simplewebapp-operator.example.com -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
	echo "This operator (pid $op) is on standby: ${holder:-another operator} holds the Lease $ns/simplewebapp-operator.example.com and reconciles; this one takes over when it goes."
fi
cat <<MSG

my-webapp is Ready. In another terminal:
  alias k='$kubectl --kubeconfig $kc'
  k get swa -n default -w
  k apply -n default -f config/samples/my-webapp-updated.yaml   # 5 replicas, new message
  k delete -n default pod -l app.kubernetes.io/instance=my-webapp --wait=false   # they come back
  k delete -n default swa my-webapp                              # everything goes
Ctrl-C stops the operator; \`make cluster-down\` stops the local cluster.
MSG
trap 'kill $op 2>/dev/null || true' INT TERM # Ctrl-C: stop the operator, exit 0
wait $op || true
