package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The host changes of a real node, and the baseline that teardown restores
// and checks against.

// nodeSysctls are the sysctls that kubelet (kernel.panic*, vm.*,
// kernel.keys.*), the CNI bridge (ip_forward) and kube-proxy may change:
// recorded at start, restored at teardown. ip_forward first: writing it
// resets the per-interface forwarding values.
var nodeSysctls = []string{
	"net.ipv4.ip_forward", "net.ipv4.conf.all.forwarding", "net.ipv6.conf.all.forwarding",
	"kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory", "vm.panic_on_oom",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
	"net.ipv4.conf.all.route_localnet",
	"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
	"net.netfilter.nf_conntrack_max", "net.netfilter.nf_conntrack_tcp_timeout_established",
	"net.netfilter.nf_conntrack_tcp_timeout_close_wait", "net.netfilter.nf_conntrack_tcp_be_liberal",
}

// nodeFixedPaths are created outside the state directory with fixed names:
// shim sockets' parent (containerd), libcni's result cache, kubelet's legacy
// log links, util-linux libmount's utab directory (any mount(8) call makes
// it) and the netns mount point. Teardown removes them in this order when
// they were not there before (umount of /run/netns creates /run/mount).
var nodeFixedPaths = []string{"/run/containerd", "/var/lib/cni", "/var/log/containers", "/run/netns", "/run/mount"}

// hostBaseline is what the host looked like before the node started.
type hostBaseline struct {
	Sysctls    [][2]string // name, value (in nodeSysctls order)
	IPTables   string      // iptables-save without counters and comments
	IP6Tables  string
	NftTables  []string // "table <family> <name>"
	FixedPaths []string // those of nodeFixedPaths that existed
	Links      []string
	Mounts     []string // mount points under nodeMountRoots
}

// nodeMountRoots are where the node's mounts are: the state directory and
// the fixed paths that kubelet, containerd or ip(8) mount on.
var nodeMountRoots = []string{nodeStateDir, "/run/containerd", "/var/lib/kubelet", "/run/netns"}

// recordBaseline records the host's state into dir/baseline.json.
func recordBaseline(dir string) (*hostBaseline, error) {
	b := &hostBaseline{}
	for _, k := range nodeSysctls {
		if v, err := readSysctl(k); err == nil {
			b.Sysctls = append(b.Sysctls, [2]string{k, v})
		}
	}
	b.IPTables, b.IP6Tables = iptablesSave("iptables-save"), iptablesSave("ip6tables-save")
	var err error
	if b.NftTables, err = nftTables(); err != nil {
		return nil, err
	}
	for _, p := range nodeFixedPaths {
		if _, err := os.Lstat(p); err == nil {
			b.FixedPaths = append(b.FixedPaths, p)
		}
	}
	if b.Links, err = links(); err != nil {
		return nil, err
	}
	b.Mounts = mountsUnder(nodeMountRoots...)
	raw, err := json.MarshalIndent(b, "", " ")
	if err != nil {
		return nil, err
	}
	return b, os.WriteFile(filepath.Join(dir, "baseline.json"), raw, 0o644)
}

func readBaseline(dir string) (*hostBaseline, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "baseline.json"))
	if err != nil {
		return nil, err
	}
	b := &hostBaseline{}
	return b, json.Unmarshal(raw, b)
}

// prepareNode takes the node lock, records the baseline and makes the host
// changes the node needs before the kube-apiserver starts, which listens on
// the bridge: the cgroups, the bridge with the node IP, the forward guard
// and IP forwarding. It sets c.nodeState as soon as there is something to
// undo.
func (c *Cluster) prepareNode(ctx context.Context, opts Options) error {
	lock, err := acquireNodeLock(ctx, c.log, c.Dir)
	if err != nil {
		return err
	}
	c.nodeLock = lock
	for _, tool := range []string{"ip", "nft", "iptables-save", "iptables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("real node needs %s (Debian: apt-get install iproute2 nftables iptables): %w", tool, err)
		}
	}
	if _, err := os.Stat(nodeStateDir); err == nil {
		return fmt.Errorf("%s exists: a real node was not cleaned up (localcluster down, or remove it by hand after checking the host)", nodeStateDir)
	}
	if _, err := os.Stat("/sys/class/net/" + nodeBridge); err == nil {
		return fmt.Errorf("bridge %s exists: a real node was not cleaned up", nodeBridge)
	}
	if err := os.MkdirAll(nodeStateDir, 0o755); err != nil {
		return err
	}
	n := &RealNode{Name: RealNodeName, IP: nodeIP, BinDir: opts.NodeBinDir, dir: nodeStateDir, clusterDir: c.Dir,
		serviceCIDR: opts.ServiceCIDR}
	c.nodeState = n
	if err := os.WriteFile(n.path("cluster-dir"), []byte(c.Dir+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(n.path("bin-dir"), []byte(n.BinDir+"\n"), 0o644); err != nil {
		return err
	}
	if _, err := recordBaseline(n.dir); err != nil {
		return fmt.Errorf("host baseline: %w", err)
	}
	if err := createNodeCgroups(); err != nil {
		return err
	}
	if err := createBridge(); err != nil {
		return err
	}
	return writeSysctl("net.ipv4.ip_forward", "1") // pods' Service traffic is routed back onto the bridge
}

// createBridge creates the bridge with the node IP and the nft table that
// drops whatever would be forwarded between it and another interface.
func createBridge() error {
	for _, args := range [][]string{
		{"link", "add", nodeBridge, "type", "bridge"},
		{"addr", "add", nodeIP + "/24", "dev", nodeBridge},
		{"link", "set", nodeBridge, "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	guard := fmt.Sprintf(`table inet %[1]s {
	chain forward {
		type filter hook forward priority -10; policy accept;
		iifname "%[2]s" oifname != "%[2]s" counter drop
		iifname != "%[2]s" oifname "%[2]s" counter drop
	}
}
`, nodeNftable, nodeBridge)
	return runStdin(guard, "nft", "-f", "-")
}

// cgroupHierarchies are the cgroup mount points: the v1 hierarchies and the
// unified one (hybrid), or /sys/fs/cgroup alone (v2).
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		d := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// isCgroup2 reports whether the hierarchy at dir is cgroup v2.
func isCgroup2(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// createNodeCgroups creates nodeCgroup and nodeCgroup/runtime in every
// hierarchy (kubelet's cgroupRoot must exist). A new v1 cpuset group starts
// with no CPUs: it gets its parent's.
func createNodeCgroups() error {
	for _, h := range cgroupHierarchies() {
		for _, sub := range []string{nodeCgroup, nodeCgroup + "/runtime"} {
			d := filepath.Join(h, sub)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if _, err := os.Stat(filepath.Join(d, f)); err != nil || isCgroup2(h) {
					continue
				}
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// cgroupPIDs are the processes in the node's cgroup subtree, in any
// hierarchy.
func cgroupPIDs() []int {
	seen := map[int]bool{}
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, nodeCgroup), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil //nolint:nilerr // gone meanwhile
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				var pid int
				if _, err := fmt.Sscan(f, &pid); err == nil && pid > 0 {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

func sysctlPath(k string) string { return "/proc/sys/" + strings.ReplaceAll(k, ".", "/") }

func readSysctl(k string) (string, error) {
	b, err := os.ReadFile(sysctlPath(k))
	return strings.TrimSpace(string(b)), err
}

func writeSysctl(k, v string) error { return os.WriteFile(sysctlPath(k), []byte(v+"\n"), 0o644) }

var iptCounters = regexp.MustCompile(`\[\d+:\d+\]`)

// iptablesSave is the output of tool (iptables-save, ip6tables-save)
// without comments and counters: what a rule set is ("" when it fails).
func iptablesSave(tool string) string {
	out, err := exec.Command(tool).Output()
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, l := range splitLines(string(out)) {
		if !strings.HasPrefix(l, "#") {
			b.WriteString(iptCounters.ReplaceAllString(l, "") + "\n")
		}
	}
	return b.String()
}

// nftTables are the lines of `nft list tables`.
func nftTables() ([]string, error) {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	return splitLines(string(out)), nil
}

// links are the names of the network interfaces.
func links() ([]string, error) {
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, nil
}

// run runs a host tool; the error carries its output.
func run(name string, args ...string) error { return runStdin("", name, args...) }

func runStdin(stdin, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// splitLines splits s into its non-empty lines.
func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, " \t"); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// cloneIntoCgroup makes the process that attr starts begin its life in cg of
// the cgroup v2 hierarchy, if there is one (clone3 CLONE_INTO_CGROUP): it
// cannot fork anything outside. The returned func closes the directory.
func cloneIntoCgroup(attr *syscall.SysProcAttr, cg string) (func(), error) {
	for _, h := range cgroupHierarchies() {
		if !isCgroup2(h) {
			continue
		}
		fd, err := unix.Open(filepath.Join(h, cg), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", filepath.Join(h, cg), err)
		}
		attr.UseCgroupFD, attr.CgroupFD = true, fd
		return func() { unix.Close(fd) }, nil
	}
	return func() {}, nil
}

// moveToV1Cgroups moves pid into cg of every cgroup v1 hierarchy. This
// happens right after the start, before the node's components fork anything
// (containerd starts shims only when asked to run a pod, after it answered).
func moveToV1Cgroups(pid int, cg string) error {
	for _, h := range cgroupHierarchies() {
		if isCgroup2(h) {
			continue
		}
		if err := os.WriteFile(filepath.Join(h, cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move pid %d to cgroup %s: %w", pid, filepath.Join(h, cg), err)
		}
	}
	return nil
}
