#!/usr/bin/env bash
# Builds a real node's binaries from the pinned module sources in
# hack/tools/node/* into a cache outside the clone, keyed by those pins
# (the style of hack/tools/build.sh):
#   k8s        kubelet, kube-proxy          (k8s.io/kubernetes, tools/k8s)
#   containerd containerd, containerd-shim-runc-v2, ctr (tools/containerd)
#   runc       runc                         (cgo, tools/runc)
#   cni        bridge, host-local, loopback, portmap (tools/cni) -> bin/cni/
#   images     pause, swa-node-test, mkimage (tools/images, stdlib only)
# Prints the bin directory as its last line. Only the Go module proxy is used.
#
#   hack/tools/build-node.sh [GROUP...]   build what is missing (default: all groups)
#   hack/tools/build-node.sh --print      only print the bin dir (no build)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools=$here/node
K8S_VERSION=v1.37.2
CONTAINERD_VERSION=$(awk '$1 == "github.com/containerd/containerd/v2" { print $2; exit }' "$tools/containerd/go.mod")
RUNC_VERSION=$(awk '$1 == "github.com/opencontainers/runc" { print $2; exit }' "$tools/runc/go.mod")
CNI_VERSION=$(awk '$1 == "github.com/containernetworking/plugins" { print $2; exit }' "$tools/cni/go.mod")

key=$(cat "$tools"/*/go.mod "$tools"/*/go.sum "$tools"/images/*/*.go "$here/build-node.sh" 2>/dev/null | sha256sum | cut -c1-12)
cache_root=${SWA_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/simplewebapp-operator}
bin_dir="$cache_root/node-k8s-$K8S_VERSION-containerd-$CONTAINERD_VERSION-$key/bin"

if [[ "${1:-}" == "--print" ]]; then
	echo "$bin_dir"
	exit 0
fi
groups=("$@")
[[ ${#groups[@]} -gt 0 ]] || groups=(images cni runc containerd k8s)

mkdir -p "$bin_dir/cni"
start=$(date +%s)
log() { printf '[node-tools %4ds] %s\n' "$(($(date +%s) - start))" "$*" >&2; }

# build OUT_SUBDIR NAMES... -- MODULE_DIR LDFLAGS [GO BUILD ARGS...] PACKAGES...:
# builds into bin_dir/OUT_SUBDIR unless every NAME is there already; nice'd,
# with an elapsed-time heartbeat.
build() {
	local sub=$1 names=() missing=0
	shift
	while [[ "$1" != "--" ]]; do names+=("$1"); shift; done
	shift
	local dir=$1 ldflags=$2
	shift 2
	local out="$bin_dir/$sub"
	for n in "${names[@]}"; do [[ -x "$out/$n" ]] || missing=1; done
	if [[ $missing == 0 ]]; then
		log "${names[*]}: cached"
		return
	fi
	log "building ${names[*]}"
	local t0 ticker tmp
	t0=$(date +%s)
	(while sleep 60; do log "  still building ${names[*]}: $(($(date +%s) - t0))s"; done) &
	ticker=$!
	tmp=$(mktemp -d "$bin_dir/../build.XXXXXX")
	if ! (cd "$dir" && nice -n "${SWA_NICE:-10}" go build -trimpath -ldflags "$ldflags" -o "$tmp/" "$@") >&2; then
		kill "$ticker" 2>/dev/null || true
		rm -rf "$tmp"
		log "FAILED building ${names[*]}"
		exit 1
	fi
	kill "$ticker" 2>/dev/null || true
	for n in "${names[@]}"; do mv -f "$tmp/$n" "$out/$n"; done
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

for g in "${groups[@]}"; do
	case $g in
	images)
		CGO_ENABLED=0 build "" pause swa-node-test mkimage -- "$tools/images" "-s -w" ./pause ./swa-node-test ./mkimage
		;;
	cni)
		CGO_ENABLED=0 build cni bridge host-local loopback portmap -- "$tools/cni" \
			"-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" \
			github.com/containernetworking/plugins/plugins/main/bridge \
			github.com/containernetworking/plugins/plugins/ipam/host-local \
			github.com/containernetworking/plugins/plugins/main/loopback \
			github.com/containernetworking/plugins/plugins/meta/portmap
		;;
	runc)
		# cgo is required (libcontainer/nsenter is C), and libseccomp
		# (Debian: libseccomp-dev): containerd gives every pod sandbox the
		# RuntimeDefault seccomp profile, which a runc without the seccomp tag
		# refuses ("seccomp: config provided but seccomp not supported"). Not
		# the libpathrs tag (a Rust library): runc then uses its Go fallback.
		pkg-config --exists libseccomp || { log "runc needs libseccomp (apt-get install libseccomp-dev)"; exit 1; }
		CGO_ENABLED=1 build "" runc -- "$tools/runc" "-s -w -X main.version=${RUNC_VERSION#v}" \
			-tags seccomp,urfave_cli_no_docs github.com/opencontainers/runc
		;;
	containerd)
		CGO_ENABLED=0 build "" containerd containerd-shim-runc-v2 ctr -- "$tools/containerd" \
			"-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2" \
			-tags no_btrfs,urfave_cli_no_docs \
			github.com/containerd/containerd/v2/cmd/containerd \
			github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
			github.com/containerd/containerd/v2/cmd/ctr
		;;
	k8s)
		CGO_ENABLED=0 build "" kubelet kube-proxy -- "$tools/k8s" \
			"-s -w $(ver_flags k8s.io/component-base/version)$(ver_flags k8s.io/client-go/pkg/version)" \
			k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
		;;
	*)
		echo "unknown group $g (images cni runc containerd k8s)" >&2
		exit 2
		;;
	esac
done
log "ready in $bin_dir"
echo "$bin_dir"
