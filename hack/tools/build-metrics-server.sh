#!/usr/bin/env bash
# Builds metrics-server (the resource metrics API that a HorizontalPodAutoscaler
# reads) from the pinned module in hack/tools/metrics-server with build-tool.sh,
# into a cache directory of its own keyed by that pin, and links it into the bin
# dir of build.sh, where internal/localcluster looks for every binary.
#
#   hack/tools/build-metrics-server.sh   build it if missing, link it, print the bin dir
set -euo pipefail

tools_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ms=$(bash "$tools_dir/build-tool.sh" metrics-server | tail -n1)
bin_dir=$(bash "$tools_dir/build.sh" --print)
mkdir -p "$bin_dir"
ln -sfn "$ms" "$bin_dir/metrics-server"
echo "$bin_dir"
