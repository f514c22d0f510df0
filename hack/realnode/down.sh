#!/usr/bin/env bash
# Stops the real node of up.sh and undoes everything it did, then checks that
# nothing is left (exit 1 and "LEFTOVER:" lines if something is):
#  1. pods: the node gets a NoExecute taint (kubelet then admits no new pod) and
#     its pods are deleted, so kubelet stops them the normal way (CNI DEL)
#     - only while kubelet and the apiserver are up; at most 60 s
#  2. kube-proxy: stopped, then `kube-proxy --cleanup` removes its rules
#  3. kubelet: stopped; every task left in containerd is killed and deleted
#  4. containerd: stopped; then every process left in the /swa-real-node cgroup
#     subtree (container processes, shims) is killed
#  5. mounts under the state dir (overlay rootfs, shm, netns, kubelet tmpfs)
#  6. demo.sh's netns swa-client, the bridge and any veth still on it, the nft forward-guard table, KUBE-*
#     and CNI-* iptables chains and nft tables that were not there before
#  7. sysctls restored to the values recorded before
#  8. cgroups /swa-real-node removed in every hierarchy
#  9. /run/containerd, /var/lib/cni, /var/log/containers, and if empty
#     /run/mount and /run/netns (ip netns mounts it on itself): removed when
#     up.sh found them absent (else only what this node put there)
# 10. the Node object (when the apiserver is up), the state dir
# SWA_REAL_NODE_KEEP_LOGS=DIR copies the logs there first.
set -uo pipefail
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $(id -u) == 0 ]] || { echo "down.sh needs root" >&2; exit 1; }

t_start=$(ts)
BIN=$(node_bin)
KUBECTL=$(cp_bin)/kubectl
B=$S/baseline
CDIR=$(cat "$S/cluster-dir" 2>/dev/null || true)
[[ -n $CDIR ]] && export KUBECONFIG=$CDIR/admin.kubeconfig
api_up() { [[ -n $CDIR && -x $KUBECTL ]] && timeout 5 "$KUBECTL" get --raw /readyz >/dev/null 2>&1; }
pidof_file() { cat "$S/pids/$1" 2>/dev/null || true; }
CTR=("$BIN/ctr" --address "$S/containerd/containerd.sock" --namespace k8s.io)
ctr_up() { [[ -S $S/containerd/containerd.sock ]] && pid_alive "$(pidof_file containerd)" && timeout 5 "${CTR[@]}" version >/dev/null 2>&1; }

if [[ -n ${SWA_REAL_NODE_KEEP_LOGS:-} && -d $S/logs ]]; then
	mkdir -p "$SWA_REAL_NODE_KEEP_LOGS" && cp -r "$S/logs/." "$SWA_REAL_NODE_KEEP_LOGS/"
fi

# stop NAME [SECONDS]: SIGTERM the recorded pid, SIGKILL after SECONDS.
stop() {
	local pid
	pid=$(pidof_file "$1")
	pid_alive "$pid" || return 0
	kill -TERM "$pid"
	for i in $(seq 1 $((${2:-10} * 5))); do pid_alive "$pid" || { say "$1 stopped"; return 0; }; sleep 0.2; done
	say "$1 (pid $pid) ignored SIGTERM: SIGKILL"
	kill -KILL "$pid" 2>/dev/null
	sleep 0.5
}

# 1. pods, the normal way
if [[ -d $S ]] && pid_alive "$(pidof_file kubelet)" && api_up && ctr_up; then
	t0=$(ts)
	"$KUBECTL" taint node "$NODE" "$LABEL-down=true:NoExecute" --overwrite >/dev/null 2>&1
	"$KUBECTL" delete pods -A --field-selector "spec.nodeName=$NODE" --grace-period=2 --wait=false >/dev/null 2>&1
	for i in $(seq 1 120); do
		[[ -z $("${CTR[@]}" tasks ls -q 2>/dev/null) ]] && break
		sleep 0.5
	done
	say "pods stopped by kubelet in $(elapsed "$t0") (tasks left: $("${CTR[@]}" tasks ls -q 2>/dev/null | wc -l))"
fi

# 2. kube-proxy
if [[ -f $S/kube-proxy/mode ]]; then
	stop kube-proxy
	"$BIN/kube-proxy" --cleanup >>"$S/logs/kube-proxy-cleanup.log" 2>&1 || say "kube-proxy --cleanup failed (see logs)"
fi

# 3. kubelet, then whatever containerd still runs
stop kubelet 15
if ctr_up; then
	for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do
		"${CTR[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1
	done
	sleep 1
	for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do
		"${CTR[@]}" tasks delete -f "$t" >/dev/null 2>&1
	done
fi

# 4. containerd, then every process left in our cgroups (shims outlive containerd)
stop containerd 15
cg_pids() {
	local d
	for d in $(cgroup_dirs); do
		[[ -d $d/$CGROUP ]] && find "$d/$CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null
	done | sort -un
}
for i in $(seq 1 20); do
	mapfile -t pids < <(cg_pids)
	[[ ${#pids[@]} == 0 ]] && break
	[[ $i == 1 ]] && say "killing what is left in /$CGROUP: $(for p in "${pids[@]}"; do printf '%s(%s) ' "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"; done)"
	kill -KILL "${pids[@]}" 2>/dev/null
	sleep 0.3
done

# 5. mounts under the state dir, deepest first, until none is left
for i in $(seq 1 10); do
	mnts=$(findmnt -rn -o TARGET | grep -E "^$S(/|$)" | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-)
	[[ -z $mnts ]] && break
	while read -r m; do
		[[ -n $m ]] && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; }
	done <<<"$mnts"
done

# 6. network (demo.sh's client netns too)
ip netns del swa-client 2>/dev/null
for v in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//'); do
	ip link del "$v" 2>/dev/null
done
ip link del "$BRIDGE" 2>/dev/null
nft delete table inet "$NFT_TABLE" 2>/dev/null
# KUBE-*/CNI-* chains that were not there before (kubelet's canary and hint
# chains, anything kube-proxy --cleanup or a CNI DEL left): delete the jumps
# to them, flush them, delete them, in one iptables-restore per family.
clean_ipt() { # clean_ipt iptables|ip6tables BASELINE
	local tool=$1 base=$2 script
	script=$("$tool-save" 2>/dev/null | awk -v base="$base" '
		BEGIN { while ((getline l < base) > 0) if (l ~ /^\*/) t = substr(l, 2); else if (l ~ /^:/) { split(l, a, " "); had[t, substr(a[1], 2)] = 1 } }
		/^\*/ { t = substr($0, 2); tables[++nt] = t; next }
		/^:/ { c = substr($1, 2); if (c ~ /^(KUBE-|CNI-)/ && !((t, c) in had)) { rm[t, c] = 1; rmlist[t] = rmlist[t] " " c } ; next }
		/^-A / { for (i = 3; i <= NF; i++) if (($i == "-j" || $i == "-g") && ((t, $(i+1)) in rm) && !((t, $2) in rm)) { sub(/^-A /, "-D "); del[t] = del[t] $0 "\n" } }
		END {
			for (k = 1; k <= nt; k++) { t = tables[k]; if (rmlist[t] == "" && del[t] == "") continue
				print "*" t; printf "%s", del[t]; n = split(rmlist[t], cs, " ")
				for (j = 1; j <= n; j++) print "-F " cs[j]
				for (j = 1; j <= n; j++) print "-X " cs[j]
				print "COMMIT" }
		}')
	[[ -z $script ]] && return 0
	printf '%s\n' "$script" | "$tool-restore" --noflush || say "$tool-restore of the cleanup failed"
}
if command -v iptables-save >/dev/null; then
	clean_ipt iptables "$B/iptables.txt"
	clean_ipt ip6tables "$B/ip6tables.txt"
fi
# nft tables that were not there before: kube-proxy's, and the empty ones
# iptables-nft made for the chains above.
if [[ -f $B/nft-tables.txt ]]; then
	nft list tables | while read -r _ fam name; do
		grep -qx "table $fam $name" "$B/nft-tables.txt" && continue
		if [[ $name == kube-proxy ]] || ! nft list table "$fam" "$name" | grep -qE '^\s+(ip|ip6|meta|counter|jump|goto|tcp|udp|ct|mark|iifname|oifname|fib|return|accept|drop|reject|masquerade|dnat|snat)'; then
			nft delete table "$fam" "$name" && say "deleted nft table $fam $name"
		else
			say "nft table $fam $name was not there before and still has rules: left alone"
		fi
	done
fi

# 7. sysctls
if [[ -f $B/sysctl.conf ]]; then
	while IFS='=' read -r k v; do
		[[ $(sysctl -n "$k" 2>/dev/null) == "$v" ]] || sysctl -qw "$k=$v" || say "could not restore $k=$v"
	done <"$B/sysctl.conf"
fi

# 8. cgroups
for d in $(cgroup_dirs); do
	[[ -d $d/$CGROUP ]] && find "$d/$CGROUP" -depth -type d -exec rmdir {} + 2>/dev/null
done

# 9. fixed paths outside the state dir
for p in "${FIXED_PATHS[@]}"; do
	[[ -e $p ]] || continue
	if [[ -f $B/paths-existing.txt ]] && ! grep -qx "$p" "$B/paths-existing.txt"; then
		case $p in
		/run/mount) rmdir "$p" 2>/dev/null ;;
		/run/netns) mountpoint -q "$p" && umount "$p"; rmdir "$p" 2>/dev/null ;;
		*) rm -rf "$p" ;;
		esac
	else
		case $p in
		/var/lib/cni) rm -f /var/lib/cni/results/"$CNI_NET"-* ;;
		/var/log/containers) find "$p" -maxdepth 1 -type l -lname "$S/*" -delete ;;
		esac
	fi
done

# 10. the Node object, the state
if api_up && "$KUBECTL" get node "$NODE" >/dev/null 2>&1; then
	"$KUBECTL" delete node "$NODE" --wait=false >/dev/null && say "deleted node $NODE"
fi

# check: compare with the baseline
leftover=0
left() { echo "LEFTOVER: $*"; leftover=1; }
for n in kubelet containerd kube-proxy; do pid_alive "$(pidof_file "$n")" && left "$n process $(pidof_file "$n")"; done
for d in /proc/[0-9]*; do # processes running a node binary
	p=${d#/proc/}
	exe=$(readlink "$d/exe" 2>/dev/null) || continue
	[[ $exe == "$BIN"/* || $exe == "$S"/* ]] && left "process $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
done
while read -r m; do left "mount $m"; done < <(findmnt -rn -o TARGET | grep -E "^$S(/|$)|^/run/containerd|^/var/lib/kubelet|^/run/netns")
ip link show "$BRIDGE" >/dev/null 2>&1 && left "bridge $BRIDGE"
if [[ -f $B/links.txt ]]; then
	while read -r l; do left "link $l"; done < <(comm -13 "$B/links.txt" <(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort))
fi
if [[ -f $B/nft-tables.txt ]]; then
	while read -r l; do left "nft $l"; done < <(comm -13 <(sort "$B/nft-tables.txt") <(nft list tables | sort))
fi
if [[ -f $B/iptables.txt ]]; then
	diff <(cat "$B/iptables.txt") <(iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//') >/dev/null || left "iptables-save differs from before: $(diff <(cat "$B/iptables.txt") <(iptables-save | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//') | head -5 | tr '\n' ' ')"
	diff <(cat "$B/ip6tables.txt") <(ip6tables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//') >/dev/null || left "ip6tables-save differs from before"
fi
if [[ -f $B/sysctl.conf ]]; then
	while IFS='=' read -r k v; do
		[[ $(sysctl -n "$k" 2>/dev/null) == "$v" ]] || left "sysctl $k=$(sysctl -n "$k") (was $v)"
	done <"$B/sysctl.conf"
fi
for d in $(cgroup_dirs); do [[ -d $d/$CGROUP ]] && left "cgroup $d/$CGROUP"; done
for p in "${FIXED_PATHS[@]}"; do
	[[ -e $p ]] && [[ -f $B/paths-existing.txt ]] && ! grep -qx "$p" "$B/paths-existing.txt" && left "path $p"
done
ip netns list 2>/dev/null | grep -qw swa-client && left "netns swa-client"

if [[ $leftover == 0 ]]; then
	rm -rf "$S"
	say "real node down in $(elapsed "$t_start"); nothing left"
else
	say "real node down in $(elapsed "$t_start") with leftovers (state kept in $S)"
	exit 1
fi
