#!/usr/bin/env bash
# Builds metrics-server (the resource metrics API that a HorizontalPodAutoscaler
# reads) from the pinned module in hack/tools/metrics-server into a cache
# directory of its own, keyed by that pin, and links it into the bin dir of
# build.sh, where internal/localcluster looks for every binary. Only the Go module
# proxy is used.
#
# A script of its own with a key of its own: build.sh's key covers build.sh,
# so building metrics-server there would have rebuilt the whole control plane
# (10+ minutes cold) once, and again at every change of this pin.
#
#   hack/tools/build-metrics-server.sh   build it if missing, link it, print the bin dir
set -euo pipefail

tools_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod_dir="$tools_dir/metrics-server"
ms_version=$(awk '$1 == "sigs.k8s.io/metrics-server" { print $2; exit }' "$mod_dir/go.mod")
key=$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
cache_root=${SWA_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/simplewebapp-operator}
ms_dir="$cache_root/metrics-server-$ms_version-$key/bin"
bin_dir=$(bash "$tools_dir/build.sh" --print)

start=$(date +%s)
log() { printf '[tools %4ds] %s\n' "$(($(date +%s) - start))" "$*" >&2; }

if [[ -x "$ms_dir/metrics-server" ]]; then
	log "metrics-server $ms_version: cached"
else
	mkdir -p "$ms_dir"
	log "building metrics-server $ms_version (cold: minutes on 2 cores; warm: seconds)"
	(while sleep 60; do log "  still building metrics-server"; done) &
	ticker=$!
	trap 'kill "$ticker" 2>/dev/null || true' EXIT
	tmp=$(mktemp -d "$ms_dir/../build.XXXXXX")
	# Its version as its own Makefile sets it (client-go's version package).
	pkg=k8s.io/client-go/pkg/version
	ldflags="-s -w -X $pkg.gitVersion=$ms_version -X $pkg.gitTreeState=clean"
	if ! (cd "$mod_dir" && GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 \
		go build -trimpath -ldflags "$ldflags" -o "$tmp/" sigs.k8s.io/metrics-server/cmd/metrics-server) >&2; then
		rm -rf "$tmp"
		log "FAILED building metrics-server"
		exit 1
	fi
	# Moved into place only once complete: a half-written binary is never
	# taken as cached.
	mv -f "$tmp/metrics-server" "$ms_dir/metrics-server"
	rm -rf "$tmp"
	log "built metrics-server in $(($(date +%s) - start))s"
fi
mkdir -p "$bin_dir"
ln -sfn "$ms_dir/metrics-server" "$bin_dir/metrics-server"
echo "$bin_dir"
