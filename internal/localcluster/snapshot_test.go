package localcluster_test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// hostSnapshot is what a real node touches on the host, recorded
// independently of the harness's own baseline and check: part name -> sorted
// lines.
type hostSnapshot map[string][]string

// nodeComms are the command names of a node's processes.
var nodeComms = regexp.MustCompile(`^(containerd|containerd-shim|containerd-shim-runc-v2|runc|kubelet|kube-proxy|pause|swa-node-test|bridge|host-local|portmap|loopback)$`)

// volatileSysctls change by themselves.
var volatileSysctls = regexp.MustCompile(`^(fs\.(dentry-state|file-nr|inode-nr|inode-state|quota\.)|kernel\.(random\.|ns_last_pid|pty\.nr|sched_domain)|net\.netfilter\.nf_conntrack_count|vm\.stat_refresh|fs\.aio-nr|kernel\.keys\.(gc_delay|persistent)|net\.ipv4\.tcp_(fastopen_key|mem)|net\.ipv4\.udp_mem|net\.ipv6\.route\.gc)`)

// excludedFiles come and go on a shared machine; the real node's lock file
// stays once made (removing a lock file races with its next user).
var excludedFiles = regexp.MustCompile(`^/var/(cache|lib/(apt|dpkg)|log/(apt|dpkg|journal))|^/run/(user|utmp)|^/var/tmp|^/run/lock/swa-real-node\.lock$`)

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// snapshotHost records processes of node binaries, mounts, links,
// addresses, routes, network namespaces, iptables and ip6tables rules
// without counters, the nft ruleset, sysctls minus volatile ones, cgroup
// directories, and the file tree of /etc /opt /run /var /usr/libexec.
func snapshotHost(t *testing.T) hostSnapshot {
	t.Helper()
	s := hostSnapshot{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		comm, err := os.ReadFile(p + "/comm")
		if c := strings.TrimSpace(string(comm)); err == nil && nodeComms.MatchString(c) {
			args, _ := os.ReadFile(p + "/cmdline")
			s["processes"] = append(s["processes"], c+" "+strings.ReplaceAll(string(args), "\x00", " "))
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(l)
		if i := indexOf(f, "-"); len(f) > 4 && i > 0 && i+2 < len(f) {
			s["mounts"] = append(s["mounts"], f[4]+" "+f[i+1]+" "+f[i+2])
		}
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		s["links"] = append(s["links"], l.Name())
	}
	for _, cmd := range [][]string{
		{"addrs", "ip", "-o", "addr", "show"}, {"routes", "ip", "route", "show", "table", "all"},
		{"netns", "ip", "netns", "list"}, {"nft", "nft", "list", "ruleset"},
		{"iptables", "iptables-save"}, {"ip6tables", "ip6tables-save"},
	} {
		out, err := exec.Command(cmd[1], cmd[2:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", cmd[1:], err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			if cmd[0] == "addrs" { // index, name, family, address: no lifetimes
				if f := strings.Fields(l); len(f) >= 4 {
					l = strings.Join(f[1:4], " ")
				}
			}
			s[cmd[0]] = append(s[cmd[0]], counters.ReplaceAllString(l, ""))
		}
	}
	_ = filepath.WalkDir("/proc/sys", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil //nolint:nilerr // unreadable: skipped, as sysctl -a does
		}
		k := strings.ReplaceAll(strings.TrimPrefix(p, "/proc/sys/"), "/", ".")
		if volatileSysctls.MatchString(k) {
			return nil
		}
		if v, err := os.ReadFile(p); err == nil {
			s["sysctl"] = append(s["sysctl"], k+" = "+strings.Join(strings.Fields(string(v)), " "))
		}
		return nil
	})
	s["cgroups"] = walkDirs(t, "/sys/fs/cgroup", 4, true)
	for _, root := range []string{"/etc", "/opt", "/run", "/var", "/usr/libexec"} {
		for _, p := range walkDirs(t, root, 4, false) {
			if !excludedFiles.MatchString(p) {
				s["files"] = append(s["files"], p)
			}
		}
	}
	if _, err := os.Lstat("/tmp/swa-real-node"); err == nil {
		s["files"] = append(s["files"], "/tmp/swa-real-node")
	}
	for k := range s {
		sort.Strings(s[k])
	}
	return s
}

// walkDirs lists the paths below root up to depth, on root's file system
// (dirsOnly: directories only).
func walkDirs(t *testing.T, root string, depth int, dirsOnly bool) []string {
	t.Helper()
	var rootDev uint64
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		return nil
	}
	rootDev = st.Dev
	var out []string
	base := strings.Count(root, "/")
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil //nolint:nilerr // vanished meanwhile
		}
		if d.IsDir() {
			var st syscall.Stat_t
			if syscall.Lstat(p, &st) == nil && st.Dev != rootDev && !dirsOnly {
				return fs.SkipDir
			}
			if strings.Count(p, "/")-base >= depth {
				out = append(out, p)
				return fs.SkipDir
			}
		}
		if !dirsOnly || d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func indexOf(f []string, x string) int {
	for i, s := range f {
		if s == x {
			return i
		}
	}
	return -1
}

// diff lists the lines that differ between two snapshots, per part.
func (a hostSnapshot) diff(b hostSnapshot) []string {
	var out []string
	parts := map[string]bool{}
	for k := range a {
		parts[k] = true
	}
	for k := range b {
		parts[k] = true
	}
	for k := range parts {
		before, after := set(a[k]), set(b[k])
		for l := range before {
			if !after[l] {
				out = append(out, fmt.Sprintf("%s: gone: %s", k, l))
			}
		}
		for l := range after {
			if !before[l] {
				out = append(out, fmt.Sprintf("%s: new: %s", k, l))
			}
		}
	}
	sort.Strings(out)
	return out
}

func set(lines []string) map[string]bool {
	m := map[string]bool{}
	for _, l := range lines {
		m[l] = true
	}
	return m
}
