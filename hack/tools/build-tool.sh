#!/usr/bin/env bash
# Builds one tool from its wrapper module hack/tools/NAME: the package of that
# go.mod's tool directive, at the versions its go.mod and go.sum pin, into a
# cache directory of its own keyed by those pins and this script. Prints the
# binary's path as its last line. Only the Go module proxy is used.
#
# One key per tool: a new pin of one tool rebuilds only that tool, and none
# of them is in build.sh's key (which would rebuild the whole control plane).
#
#   hack/tools/build-tool.sh NAME            build it if missing, print its path
#   hack/tools/build-tool.sh --print NAME    only print its path (no build)
#
# NAME: metrics-server (build-metrics-server.sh), golangci-lint (make lint),
# promtool (the alert rule tests of tests/promql).
set -euo pipefail

print_only=0
if [[ "${1:-}" == "--print" ]]; then
	print_only=1
	shift
fi
name=${1:?usage: build-tool.sh [--print] NAME}
tools_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod_dir="$tools_dir/$name"
[[ -f "$mod_dir/go.mod" ]] || { echo "build-tool.sh: no wrapper module $mod_dir/go.mod" >&2; exit 2; }

pkg=$(awk '$1 == "tool" { print $2; exit }' "$mod_dir/go.mod")
# The version of the module that holds pkg: the longest required path that is
# a prefix of it.
version=$(awk -v p="$pkg" '
	{ m = ($1 == "require") ? $2 : $1; v = ($1 == "require") ? $3 : $2 }
	(p == m || index(p, m "/") == 1) && length(m) > best { best = length(m); ver = v }
	END { print ver }' "$mod_dir/go.mod")

# What differs between tools, all of it in this script and so in the key.
tags= ldflags="-s -w" cgo=${CGO_ENABLED:-}
case $name in
metrics-server)
	# Its version as its own Makefile sets it (client-go's version package).
	ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitTreeState=clean"
	cgo=0
	;;
promtool)
	# Rule checks and tests need no service discovery: remove_all_sd leaves
	# out the cloud SDKs that most of a cold promtool build would compile.
	tags=remove_all_sd
	;;
esac

key=$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
cache_root=${SWA_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/simplewebapp-operator}
out_dir="$cache_root/$name-$version-$key/bin"
bin="$out_dir/$name"
if [[ $print_only == 1 || -x "$bin" ]]; then
	echo "$bin"
	exit 0
fi

start=$(date +%s)
log() { printf '[tools %4ds] %s\n' "$(($(date +%s) - start))" "$*" >&2; }
mkdir -p "$out_dir"
log "building $name $version (cold: minutes on 2 cores; warm: seconds)"
tmp=$(mktemp -d "$out_dir/../build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$mod_dir" && GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=$cgo \
	go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$tmp/$name" "$pkg") >&2 &
build=$!
# A heartbeat from the foreground: a background ticker's sleep would outlive
# the script and hold the pipe of a caller that reads its output.
for ((s = 1; ; s++)); do
	kill -0 "$build" 2>/dev/null || break
	sleep 1
	((s % 60)) || log "  still building $name"
done
if ! wait "$build"; then
	log "FAILED building $name"
	exit 1
fi
# Moved into place only once complete: a half-written binary is never taken
# as cached.
mv -f "$tmp/$name" "$bin"
log "built $name in $(($(date +%s) - start))s"
echo "$bin"
