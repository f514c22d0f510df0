#!/usr/bin/env bash
# Records the host state a real node touches, for a before/after comparison
# independent of down.sh's own check:
#
#   hack/realnode/snapshot.sh DIR            write the snapshot into DIR
#   hack/realnode/snapshot.sh --diff A B     compare two snapshots (exit 1 if they differ)
#
# Covers: node processes (containerd, shims, runc, kubelet, kube-proxy, pods), mounts, links, network
# namespaces, iptables/ip6tables rules (counters dropped), the nft ruleset,
# sysctls (minus the ones that change by themselves), cgroup directories, and
# the file tree of /etc /opt /run /var /usr/libexec (depth 4).
set -uo pipefail

if [[ ${1:-} == --diff ]]; then
	rc=0
	for f in "$2"/*.txt; do
		n=$(basename "$f")
		if ! d=$(diff "$f" "$3/$n"); then
			echo "--- $n differs:"
			echo "$d" | head -40
			rc=1
		fi
	done
	[[ $rc == 0 ]] && echo "snapshots $2 and $3 are the same"
	exit $rc
fi

out=${1:?usage: snapshot.sh DIR | --diff A B}
mkdir -p "$out"
# Processes of a node (the machine is shared: other processes come and go).
ps -eo comm=,args= | awk '$1 ~ /^(containerd|containerd-shim|runc|kubelet|kube-proxy|pause|swa-node-test|bridge|host-local|portmap|loopback)$/' \
	| sort >"$out/processes.txt"
findmnt -rn -o TARGET,FSTYPE,SOURCE | sort >"$out/mounts.txt"
ip -o link show | awk -F': ' '{print $2}' | sort >"$out/links.txt"
ip -o addr show | awk '{print $2, $3, $4}' | sort >"$out/addrs.txt"
ip route show table all | sort >"$out/routes.txt"
ip netns list | sort >"$out/netns.txt"
iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' >"$out/iptables.txt"
ip6tables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' >"$out/ip6tables.txt"
nft list ruleset 2>/dev/null >"$out/nft.txt"
sysctl -a 2>/dev/null | grep -v -E '^(fs\.(dentry-state|file-nr|inode-nr|inode-state|quota\.)|kernel\.(random\.|ns_last_pid|pty\.nr|sched_domain)|net\.netfilter\.nf_conntrack_count|vm\.stat_refresh|fs\.aio-nr|kernel\.keys\.(gc_delay|persistent)|net\.ipv4\.tcp_(fastopen_key|mem)|net\.ipv4\.udp_mem|net\.ipv6\.route\.gc)' \
	| sort >"$out/sysctl.txt"
find /sys/fs/cgroup -mindepth 1 -maxdepth 4 -type d 2>/dev/null | sort >"$out/cgroups.txt"
find /etc /opt /run /var /usr/libexec -xdev -maxdepth 4 2>/dev/null \
	| grep -v -E '^/var/(cache|lib/(apt|dpkg)|log/(apt|dpkg|journal))|^/run/(user|utmp)|^/var/tmp' | sort >"$out/files.txt"
echo "snapshot in $out"
