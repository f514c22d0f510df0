#!/usr/bin/env bash
# Installs the Debian packages a real node and its images need, when missing
# (as root, with apt-get; otherwise it names them and fails):
#   gcc libc6-dev pkg-config libseccomp-dev  building runc (cgo, seccomp)
#   nftables iptables iproute2               the node's network and kube-proxy
#   nginx-light                              the web server's local stand-in image
# An nginx service that the install starts is stopped again (by its pid file).
#
#   hack/tools/node-deps.sh [--check]   --check: only report what is missing
set -euo pipefail
cd "$(dirname "$0")/../.."

missing=()
need() { # need PACKAGE TEST...: PACKAGE is missing unless the test succeeds
	local pkg=$1
	shift
	"$@" >/dev/null 2>&1 || missing+=("$pkg")
}
need gcc command -v gcc
need libc6-dev test -e /usr/include/stdio.h
need pkg-config command -v pkg-config
need libseccomp-dev pkg-config --exists libseccomp
need nftables command -v nft
need iptables command -v iptables-save
need iproute2 command -v ip
need nginx-light test -x /usr/sbin/nginx
[[ ${#missing[@]} == 0 ]] && exit 0
if [[ ${1:-} == --check ]]; then
	echo "missing Debian packages: ${missing[*]}"
	exit 1
fi
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
	echo "the real node needs these Debian packages: ${missing[*]} (apt-get install ${missing[*]})" >&2
	exit 1
fi
echo "installing ${missing[*]} (Debian)" >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
if [[ " ${missing[*]} " == *" nginx-light "* ]]; then
	bash tests/webserver/stop-nginx-service.sh
fi
