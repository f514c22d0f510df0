#!/usr/bin/env bash
# The one build of the operator's binaries: `make build`, the Dockerfile and
# CI all run this, so a release image holds exactly what was tested.
#
#   hack/build.sh [OUT_DIR]       bin/ by default: simplewebapp-operator, kubectl-swa
#   hack/build.sh --ldflags       print the linker flags only
#
# VERSION (default: the VERSION file) is stamped into
# internal/version.Operator (what min-operator-version is compared with,
# --version, the startup log line and simplewebapp_build_info); REVISION
# (default: git rev-parse, "-dirty" with uncommitted changes; the Dockerfile
# has no .git and gets it as a build argument) into main.revision.
# GOOS/GOARCH cross-compile (docker buildx passes TARGETOS/TARGETARCH).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:-$(<VERSION)}
version=${version//[[:space:]]/}
if [[ -z "${REVISION:-}" ]]; then
	REVISION=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
	if [[ $REVISION != unknown ]] && ! git diff --quiet HEAD -- 2>/dev/null; then
		REVISION+=-dirty
	fi
fi
ldflags="-s -w -X example.com/simplewebapp-operator/internal/version.Operator=$version -X main.revision=$REVISION"
if [[ "${1:-}" == --ldflags ]]; then
	echo "$ldflags"
	exit 0
fi

out=${1:-bin}
export CGO_ENABLED=0 # static: the image's base has no libc
go build -trimpath -ldflags "$ldflags" -o "$out/simplewebapp-operator" .
go build -trimpath -ldflags "$ldflags" -o "$out/kubectl-swa" ./cmd/kubectl-swa
