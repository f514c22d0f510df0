package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"golang.org/x/sys/unix"
)

// nodeTeardown undoes a real node, from a live Cluster or from what
// StopFromDir reads on disk. It kills only the node's recorded processes and
// what is in the node's cgroup subtree.
type nodeTeardown struct {
	n      *RealNode
	client kubernetes.Interface // nil: the API is not reachable
	procs  map[string]*proc     // the node's components (done may be nil)
	log    io.Writer

	t0    time.Time
	steps []string // "step duration", for the log
	errs  []error
}

// nodeTeardown is the teardown of the cluster's real node.
func (c *Cluster) nodeTeardown() *nodeTeardown {
	t := &nodeTeardown{n: c.nodeState, procs: map[string]*proc{}, log: c.log}
	for _, p := range c.procs {
		if isNodeComponent(p.name) {
			t.procs[p.name] = p
		}
	}
	if c.restCfg != nil {
		cfg := rest.CopyConfig(c.restCfg)
		cfg.Timeout = 10 * time.Second
		t.client, _ = kubernetes.NewForConfig(cfg)
	}
	return t
}

func isNodeComponent(name string) bool {
	return name == Containerd || name == Kubelet || name == KubeProxy
}

// stopNodeFromDir starts tearing down the real node of the detached cluster
// in dir, if it has one, from what is on disk: the node's state directory
// names the cluster, pids the processes. It takes the node lock for the
// whole teardown, so that no other node starts while this one is half gone;
// the returned func finishes the teardown once the control plane is
// stopped, and lets go of the lock.
func stopNodeFromDir(dir string, pids []NamedPID) (finish func() error, err error) {
	if RealNodeStateDir(dir) == "" {
		return func() error { return nil }, nil // no real node of this cluster
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lock, err := acquireNodeLock(ctx, os.Stderr, dir)
	if err != nil {
		return nil, err
	}
	binDir, _ := os.ReadFile(filepath.Join(nodeStateDir, "bin-dir"))
	t := &nodeTeardown{
		n: &RealNode{Name: RealNodeName, IP: nodeIP, BinDir: strings.TrimSpace(string(binDir)), dir: nodeStateDir,
			clusterDir: dir},
		procs: map[string]*proc{},
		log:   os.Stderr,
	}
	for _, p := range pids {
		if isNodeComponent(p.Name) {
			t.procs[p.Name] = &proc{name: p.Name, pid: p.PID}
		}
	}
	if cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "admin.kubeconfig")); err == nil {
		cfg.Timeout = 10 * time.Second
		t.client, _ = kubernetes.NewForConfig(cfg)
	}
	t.stopProcesses()
	return func() error { return errors.Join(t.undoHost(), lock.release()) }, nil
}

// stopProcesses is the first half of a teardown, while the kube-apiserver
// still runs: kubelet stops the pods, then kube-proxy (and its rules),
// kubelet and containerd stop, whatever is left in the node's cgroups is
// killed, the mounts under the state directory go and the Node object is
// deleted.
func (t *nodeTeardown) stopProcesses() {
	t.t0 = time.Now()
	ts := time.Now()
	t.drainPods()
	t.mark("pods", ts)
	stop := func(name string) {
		if p := t.procs[name]; p != nil {
			if err := stopPID(p.name, p.pid, p.done); err != nil {
				t.errs = append(t.errs, err)
			}
		}
	}
	ts = time.Now()
	if p := t.procs[KubeProxy]; p != nil {
		stop(KubeProxy)
		// Removes its nftables tables (and any iptables rules of other modes).
		cmd := exec.Command(filepath.Join(t.n.BinDir, KubeProxy), "--cleanup")
		if f, err := os.OpenFile(filepath.Join(t.n.clusterDir, "kube-proxy-cleanup.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			cmd.Stdout, cmd.Stderr = f, f
			defer f.Close()
		}
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(t.log, "cluster: kube-proxy --cleanup: %v\n", err)
		}
	}
	t.mark("kube-proxy", ts)
	ts = time.Now()
	stop(Kubelet)
	t.killTasks()
	stop(Containerd)
	t.mark("kubelet+containerd", ts)
	ts = time.Now()
	// Shims (and their containers) outlive containerd.
	killCgroup(t.log)
	unmountUnder(t.n.dir)
	t.mark("cgroup+mounts", ts)
	if t.client != nil {
		ts = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = t.client.CoreV1().Nodes().Delete(ctx, t.n.Name, metav1.DeleteOptions{})
		t.mark("node object", ts)
	}
}

// undoHost is the second half, once the control plane is stopped too (its
// kube-apiserver listens on the bridge): the network, sysctls, cgroups and
// fixed paths are restored, and the host is checked against the baseline
// recorded at start. The error lists what is left; the state directory is
// removed only when nothing is.
func (t *nodeTeardown) undoHost() error {
	ts := time.Now()
	base, err := readBaseline(t.n.dir)
	if err != nil {
		base = nil // the start failed before it was recorded: nothing of the host was changed
	}
	t.errs = append(t.errs, undoNetwork(t.log, base))
	if base != nil {
		for _, kv := range base.Sysctls {
			if v, err := readSysctl(kv[0]); err == nil && v != kv[1] {
				if err := writeSysctl(kv[0], kv[1]); err != nil {
					t.errs = append(t.errs, fmt.Errorf("restore sysctl %s=%s: %w", kv[0], kv[1], err))
				}
			}
		}
	}
	removeNodeCgroups()
	removeFixedPaths(t.n.dir, base)
	t.mark("host", ts)
	left := t.leftovers(base)
	if len(left) > 0 {
		t.errs = append(t.errs, fmt.Errorf("real node leftovers on the host (state kept in %s):\n  %s", t.n.dir, strings.Join(left, "\n  ")))
	} else if err := os.RemoveAll(t.n.dir); err != nil {
		t.errs = append(t.errs, err)
	}
	fmt.Fprintf(t.log, "cluster: real node torn down in %s (%s; %d leftovers)\n", since(t.t0), strings.Join(t.steps, ", "), len(left))
	return errors.Join(t.errs...)
}

func (t *nodeTeardown) mark(step string, since time.Time) {
	t.steps = append(t.steps, fmt.Sprintf("%s %s", step, time.Since(since).Round(time.Millisecond)))
}

func (t *nodeTeardown) alive(name string) bool {
	p := t.procs[name]
	if p == nil {
		return false
	}
	if p.done != nil {
		return !p.exited()
	}
	return Alive(name, p.pid)
}

// drainPods lets kubelet stop the node's pods the normal way (so that CNI
// DEL runs): a NoExecute taint keeps new pods off, the pods are deleted,
// and it waits, at most a minute, until containerd runs no task.
func (t *nodeTeardown) drainPods() {
	if t.client == nil || !t.alive(Kubelet) || !t.alive(Containerd) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
	defer cancel()
	if _, err := t.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return
	}
	node, err := t.client.CoreV1().Nodes().Get(ctx, t.n.Name, metav1.GetOptions{})
	if err != nil {
		return
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: RealNodeLabel + "-down", Value: "true", Effect: corev1.TaintEffectNoExecute})
	_, _ = t.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	pods, err := t.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + t.n.Name})
	if err == nil {
		grace := int64(2)
		for _, p := range pods.Items {
			_ = t.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		}
	}
	t0 := time.Now()
	for ctx.Err() == nil {
		out, err := t.n.ctrOutput(ctx, "tasks", "ls", "-q")
		if err != nil || strings.TrimSpace(out) == "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintf(t.log, "cluster: real node's pods stopped by kubelet in %s\n", since(t0))
}

// killTasks kills and deletes what containerd still runs once kubelet is
// gone.
func (t *nodeTeardown) killTasks() {
	if !t.alive(Containerd) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := t.n.ctrOutput(ctx, "tasks", "ls", "-q")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(out) {
		_ = t.n.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
	}
	for _, id := range strings.Fields(out) {
		_ = t.n.ctr(ctx, "tasks", "delete", "-f", id)
	}
}

// killCgroup SIGKILLs every process in the node's cgroup subtree until it is
// empty (at most 10 s).
func killCgroup(log io.Writer) {
	deadline := time.Now().Add(10 * time.Second)
	for first := true; time.Now().Before(deadline); first = false {
		pids := cgroupPIDs()
		if len(pids) == 0 {
			return
		}
		if first {
			fmt.Fprintf(log, "cluster: killing what is left in the cgroup /%s: %v\n", nodeCgroup, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mountsUnder are the mount points at or below one of dirs, deepest first.
func mountsUnder(dirs ...string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range splitLines(string(b)) {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder unmounts everything below dir (overlay rootfs, shm, netns,
// kubelet's tmpfs volumes, the client netns), deepest first, until nothing
// is left; lazily when a plain unmount fails.
func unmountUnder(dir string) {
	for range 10 {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return
		}
		for _, mp := range mps {
			if unix.Unmount(mp, 0) != nil {
				_ = unix.Unmount(mp, unix.MNT_DETACH)
			}
		}
	}
}

// undoNetwork deletes the bridge, its veths, the forward guard, and the
// KUBE-*/CNI-* iptables chains and nft tables that were not there before.
func undoNetwork(log io.Writer, base *hostBaseline) error {
	ports, _ := os.ReadDir("/sys/class/net/" + nodeBridge + "/brif")
	for _, p := range ports {
		_ = run("ip", "link", "del", p.Name())
	}
	if _, err := os.Stat("/sys/class/net/" + clientVeth); err == nil {
		_ = run("ip", "link", "del", clientVeth)
	}
	if _, err := os.Stat("/sys/class/net/" + nodeBridge); err == nil {
		_ = run("ip", "link", "del", nodeBridge)
	}
	_ = run("nft", "delete", "table", "inet", nodeNftable)
	if base == nil {
		return nil
	}
	var errs []error
	for _, tool := range []struct{ save, restore, base string }{
		{"iptables-save", "iptables-restore", base.IPTables}, {"ip6tables-save", "ip6tables-restore", base.IP6Tables},
	} {
		if script := iptablesCleanup(iptablesSave(tool.save), tool.base); script != "" {
			if err := runStdin(script, tool.restore, "--noflush"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, cleanNftTables(log, base.NftTables))
	return errors.Join(errs...)
}

// iptablesCleanup is an iptables-restore --noflush script that deletes the
// KUBE-* and CNI-* chains of current that base lacks (kubelet's canary and
// hint chains, anything kube-proxy or a CNI DEL left): the jumps to them,
// then their rules, then the chains.
func iptablesCleanup(current, base string) string {
	had := map[string]bool{}
	table := ""
	for _, l := range splitLines(base) {
		if strings.HasPrefix(l, "*") {
			table = l[1:]
		} else if strings.HasPrefix(l, ":") {
			had[table+" "+strings.Fields(l[1:])[0]] = true
		}
	}
	var tables []string
	rm := map[string][]string{} // table -> chains
	isRm := map[string]bool{}   // "table chain"
	deletes := map[string][]string{}
	for _, l := range splitLines(current) {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
			tables = append(tables, table)
		case strings.HasPrefix(l, ":"):
			c := strings.Fields(l[1:])[0]
			if (strings.HasPrefix(c, "KUBE-") || strings.HasPrefix(c, "CNI-")) && !had[table+" "+c] {
				rm[table] = append(rm[table], c)
				isRm[table+" "+c] = true
			}
		case strings.HasPrefix(l, "-A "):
			f := strings.Fields(l)
			for i := 2; i+1 < len(f); i++ {
				if (f[i] == "-j" || f[i] == "-g") && isRm[table+" "+f[i+1]] && !isRm[table+" "+f[1]] {
					deletes[table] = append(deletes[table], "-D "+l[3:])
					break
				}
			}
		}
	}
	var b strings.Builder
	for _, t := range tables {
		if len(rm[t]) == 0 && len(deletes[t]) == 0 {
			continue
		}
		b.WriteString("*" + t + "\n")
		for _, d := range deletes[t] {
			b.WriteString(d + "\n")
		}
		for _, c := range rm[t] {
			b.WriteString("-F " + c + "\n")
		}
		for _, c := range rm[t] {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// cleanNftTables deletes the nft tables that were not there before:
// kube-proxy's, and those iptables-nft made and that are empty now. A new
// table that still has rules belongs to someone else: left alone.
func cleanNftTables(log io.Writer, base []string) error {
	now, err := nftTables()
	if err != nil {
		return err
	}
	had := map[string]bool{}
	for _, t := range base {
		had[t] = true
	}
	for _, t := range now {
		f := strings.Fields(t)
		if had[t] || len(f) != 3 {
			continue
		}
		if f[2] != "kube-proxy" {
			out, err := exec.Command("nft", "list", "table", f[1], f[2]).Output()
			if err != nil || nftHasRules(string(out)) {
				fmt.Fprintf(log, "cluster: nft %s was not there before and has rules: left alone\n", t)
				continue
			}
		}
		_ = run("nft", "delete", "table", f[1], f[2])
	}
	return nil
}

// nftHasRules reports whether a listed nft table has a rule.
func nftHasRules(listing string) bool {
	for _, l := range splitLines(listing) {
		w := strings.Fields(l)[0]
		switch w {
		case "table", "chain", "type", "policy", "}", "set", "map", "elements", "flags":
			continue
		}
		return true
	}
	return false
}

// removeNodeCgroups removes the node's cgroups in every hierarchy, deepest
// first.
func removeNodeCgroups() {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, nodeCgroup), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i])
		}
	}
}

// removeFixedPaths removes the fixed paths that were not there before;
// of those that were, only what this node put there.
func removeFixedPaths(dir string, base *hostBaseline) {
	existed := map[string]bool{}
	if base != nil {
		for _, p := range base.FixedPaths {
			existed[p] = true
		}
	}
	for _, p := range nodeFixedPaths {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		switch {
		case base != nil && !existed[p] && p == "/run/netns":
			for _, mp := range mountsUnder(p) {
				_ = unix.Unmount(mp, unix.MNT_DETACH)
			}
			_ = unix.Rmdir(p)
		case base != nil && !existed[p] && p == "/run/mount":
			_ = unix.Rmdir(p)
		case base != nil && !existed[p]:
			_ = os.RemoveAll(p)
		case p == "/var/lib/cni":
			ms, _ := filepath.Glob("/var/lib/cni/results/" + nodeCNINet + "-*")
			for _, m := range ms {
				_ = os.Remove(m)
			}
		case p == "/var/log/containers":
			entries, _ := os.ReadDir(p)
			for _, e := range entries {
				if target, err := os.Readlink(filepath.Join(p, e.Name())); err == nil && strings.HasPrefix(target, dir+"/") {
					_ = os.Remove(filepath.Join(p, e.Name()))
				}
			}
		}
	}
}

// leftovers compares the host with the baseline.
func (t *nodeTeardown) leftovers(base *hostBaseline) []string {
	var left []string
	for name := range t.procs {
		if t.alive(name) {
			left = append(left, fmt.Sprintf("process %s (pid %d)", name, t.procs[name].pid))
		}
	}
	left = append(left, nodeProcesses(t.n.BinDir, t.n.dir)...)
	if pids := cgroupPIDs(); len(pids) > 0 {
		left = append(left, fmt.Sprintf("processes in cgroup /%s: %v", nodeCgroup, pids))
	}
	var mountsBefore []string
	if base != nil {
		mountsBefore = base.Mounts
	}
	left = append(left, added("mount", mountsBefore, mountsUnder(nodeMountRoots...))...)
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, nodeCgroup)); err == nil {
			left = append(left, "cgroup "+filepath.Join(h, nodeCgroup))
		}
	}
	if _, err := os.Stat("/sys/class/net/" + nodeBridge); err == nil {
		left = append(left, "bridge "+nodeBridge)
	}
	if base == nil {
		return left
	}
	now, _ := links()
	left = append(left, added("link", base.Links, now)...)
	tables, _ := nftTables()
	left = append(left, added("nft", base.NftTables, tables)...)
	if s := iptablesSave("iptables-save"); s != base.IPTables {
		left = append(left, "iptables rules differ from before: "+firstDiff(base.IPTables, s))
	}
	if s := iptablesSave("ip6tables-save"); s != base.IP6Tables {
		left = append(left, "ip6tables rules differ from before: "+firstDiff(base.IP6Tables, s))
	}
	for _, kv := range base.Sysctls {
		if v, err := readSysctl(kv[0]); err == nil && v != kv[1] {
			left = append(left, fmt.Sprintf("sysctl %s=%s (was %s)", kv[0], v, kv[1]))
		}
	}
	existed := map[string]bool{}
	for _, p := range base.FixedPaths {
		existed[p] = true
	}
	for _, p := range nodeFixedPaths {
		if _, err := os.Lstat(p); err == nil && !existed[p] {
			left = append(left, "path "+p)
		}
	}
	return left
}

// nodeProcesses are the processes running a binary of binDir or of the
// state directory (a container's), as "process PID: cmdline".
func nodeProcesses(binDir, dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || (!strings.HasPrefix(exe, binDir+"/") && !strings.HasPrefix(exe, dir+"/")) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, "process "+e.Name()+": "+strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
	}
	return out
}

// added are the elements of now that before lacks, as "what element".
func added(what string, before, now []string) []string {
	had := map[string]bool{}
	for _, b := range before {
		had[b] = true
	}
	var out []string
	for _, x := range now {
		if !had[x] {
			out = append(out, what+" "+x)
		}
	}
	return out
}

// firstDiff is the first line in which a and b differ.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: %q, was %q", i+1, y, x)
		}
	}
	return ""
}
