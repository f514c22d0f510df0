#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) and the helm CLI (tests/install, make
# helm-template) from the pinned module sources in hack/tools/*
# into a cache outside the clone, keyed by those pins. Prints the bin directory
# as its last line. Only the Go module proxy is used.
#
#   hack/tools/build.sh            build what is missing, print the bin dir
#   hack/tools/build.sh --print    only print the bin dir (no build)
set -euo pipefail

tools_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
KWOK_VERSION=v0.8.0

# The key covers every input of the build: the wrapper modules (their go.mod and
# go.sum pin all versions), the etcd main and this script (ldflags).
key=$(cat "$tools_dir"/k8s/go.mod "$tools_dir"/k8s/go.sum "$tools_dir"/etcd/go.mod \
	"$tools_dir"/etcd/go.sum "$tools_dir"/etcd/main.go "$tools_dir"/kwok/go.mod \
	"$tools_dir"/kwok/go.sum "$tools_dir"/helm/go.mod "$tools_dir"/helm/go.sum \
	"$tools_dir"/build.sh | sha256sum | cut -c1-12)
cache_root=${SWA_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/simplewebapp-operator}
bin_dir="$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-$key/bin"

if [[ "${1:-}" == "--print" ]]; then
	echo "$bin_dir"
	exit 0
fi

mkdir -p "$bin_dir"
start=$(date +%s)
log() { printf '[tools %4ds] %s\n' "$(($(date +%s) - start))" "$*" >&2; }

# build NAMES... -- MODULE_DIR LDFLAGS PACKAGES...: builds PACKAGES in MODULE_DIR
# unless every NAME is already in bin_dir, with an elapsed-time heartbeat so a
# 10-minute cold compile does not look hung.
build() {
	local names=() missing=0
	while [[ "$1" != "--" ]]; do names+=("$1"); shift; done
	shift
	local dir=$1 ldflags=$2
	shift 2
	for n in "${names[@]}"; do [[ -x "$bin_dir/$n" ]] || missing=1; done
	if [[ $missing == 0 ]]; then
		log "${names[*]}: cached"
		return
	fi
	log "building ${names[*]} (cold: minutes on 2 cores; warm: seconds)"
	local t0 ticker tmp
	t0=$(date +%s)
	(while sleep 60; do log "  still building ${names[*]}: $(($(date +%s) - t0))s"; done) &
	ticker=$!
	tmp=$(mktemp -d "$bin_dir/../build.XXXXXX")
	if ! (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" "$@") >&2; then
		kill "$ticker" 2>/dev/null || true
		rm -rf "$tmp"
		log "FAILED building ${names[*]}"
		exit 1
	fi
	kill "$ticker" 2>/dev/null || true
	# Move into place only after a complete build, so an interrupted build never
	# leaves a half-written binary that later runs would take as cached.
	for n in "${names[@]}"; do mv -f "$tmp/$n" "$bin_dir/$n"; done
	rm -rf "$tmp"
	log "built ${names[*]} in $(($(date +%s) - t0))s"
}

export GOWORK=off GOFLAGS=-mod=readonly
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ver_flags() {
	local pkg=$1 v=${K8S_VERSION#v}
	local minor=${v#*.}
	minor=${minor%%.*}
	printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=%s ' \
		"$pkg" "$K8S_VERSION" "$pkg" "${v%%.*}" "$pkg" "$minor" "$pkg" "$pkg" "$build_date"
}
k8s_ldflags="-s -w $(ver_flags k8s.io/component-base/version)$(ver_flags k8s.io/client-go/pkg/version)"

build etcd -- "$tools_dir/etcd" "-s -w" .
build kube-apiserver kube-controller-manager kube-scheduler kubectl -- "$tools_dir/k8s" "$k8s_ldflags" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
build kwok -- "$tools_dir/kwok" "-s -w" sigs.k8s.io/kwok/cmd/kwok
# helm: the version and the default Kubernetes version of `helm template`
# (Capabilities.KubeVersion) set as helm's own Makefile does: from the pins of
# helm/go.mod (helm.sh/helm/v3, and k8s.io/client-go v0.N -> 1.N).
mod_version() { awk -v m="$1" '$1 == m { print $2; exit }' "$tools_dir/helm/go.mod"; }
helm_version=$(mod_version helm.sh/helm/v3)
helm_k8s_minor=$(mod_version k8s.io/client-go | cut -d. -f2)
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	helm_ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$helm_k8s_minor"
done
build helm -- "$tools_dir/helm" "$helm_ldflags" helm.sh/helm/v3/cmd/helm
log "all binaries ready in $bin_dir"
echo "$bin_dir"
