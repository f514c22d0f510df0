package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	pidsFile = "pids"
	// stopGrace is how long a component gets after SIGTERM before SIGKILL.
	stopGrace = 10 * time.Second
)

// proc is one started component.
type proc struct {
	name string // also the log file name
	pid  int
	bin  string        // path of the binary
	args []string      // its flags, to start it again (Cluster.Restart)
	env  []string      // nil: ours
	done chan struct{} // closed once the child has been reaped
	// cgroup, when set, is a cgroup path (relative to each hierarchy's root)
	// that the process runs in (the real node's).
	cgroup string
}

// startProc starts binDir/name with args, logging to dir/name.log.
func startProc(dir, binDir, name string, detach bool, args []string) (*proc, error) {
	return startProcSpec(dir, &proc{name: name, bin: filepath.Join(binDir, name), args: args}, detach)
}

// startProcSpec starts the process that spec describes (name, bin, args,
// env, cgroup), logging to dir/<name>.log, and returns it as a new proc.
func startProcSpec(dir string, spec *proc, detach bool) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(dir, spec.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child gets the file descriptor itself; our copy can go right away.
	defer logf.Close()
	cmd := exec.Command(spec.bin, spec.args...)
	cmd.Dir = dir
	cmd.Env = spec.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if detach {
		// Own process group: a Ctrl-C in the terminal that ran "localcluster
		// up" does not reach it, and it outlives this process.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	} else {
		// A crashed or killed test binary leaves nothing behind.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if spec.cgroup != "" {
		closeFD, err := cloneIntoCgroup(cmd.SysProcAttr, spec.cgroup)
		if err != nil {
			return nil, err
		}
		defer closeFD()
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	p := &proc{name: spec.name, pid: cmd.Process.Pid, bin: spec.bin, args: spec.args, env: spec.env,
		cgroup: spec.cgroup, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // reap, so that a stopped child is really gone
		close(p.done)
	}()
	if spec.cgroup != "" {
		if err := moveToV1Cgroups(p.pid, spec.cgroup); err != nil {
			_ = cmd.Process.Kill()
			<-p.done
			return nil, fmt.Errorf("start %s: %w", spec.name, err)
		}
	}
	return p, nil
}

// startComponent starts a component with args and the flags that Options add
// to it, and records it.
func (c *Cluster) startComponent(name string, args ...string) error {
	p, err := startProc(c.Dir, c.binDir, name, c.detach, append(args, c.extraArgs[name]...))
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.PIDs[name] = p.pid
	// Rewritten after every start, so that StopFromDir finds even a
	// half-started cluster.
	return writePIDs(c.Dir, c.procs)
}

// exited reports whether a child of ours has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// writePIDs records "component pid" lines in start order in dir/pids.
func writePIDs(dir string, procs []*proc) error {
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "%s %d\n", p.name, p.pid)
	}
	tmp := filepath.Join(dir, pidsFile+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, pidsFile))
}

// ReadPIDs returns the components recorded in dir/pids, in start order.
func ReadPIDs(dir string) ([]NamedPID, error) {
	f, err := os.Open(filepath.Join(dir, pidsFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []NamedPID
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		pid, err := strconv.Atoi(fields[1])
		if err != nil || pid <= 1 {
			return nil, fmt.Errorf("%s: bad line %q", f.Name(), sc.Text())
		}
		out = append(out, NamedPID{Name: fields[0], PID: pid})
	}
	return out, sc.Err()
}

// NamedPID is a component and its process id.
type NamedPID struct {
	Name string
	PID  int
}

// CPUSeconds is the user and system CPU time pid has used, from
// /proc/<pid>/stat.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after "(comm) ", which may hold spaces: state is the first,
	// utime the 12th and stime the 13th, in clock ticks (USER_HZ, 100).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || len(s) < i+2 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ut, err := strconv.ParseFloat(f[11], 64)
	if err != nil {
		return 0, err
	}
	st, err := strconv.ParseFloat(f[12], 64)
	if err != nil {
		return 0, err
	}
	return (ut + st) / 100, nil
}

// Alive reports whether pid is a running process of the named component. It
// checks the command name so that a recycled PID of an unrelated process is
// never taken for (or signalled as) ours; zombies count as gone.
func Alive(name string, pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// /proc/PID/stat is "pid (comm) state ..."; comm is cut to 15 bytes.
	s := string(stat)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open || len(s) < closing+3 {
		return false
	}
	comm, state := s[open+1:closing], s[closing+2]
	if state == 'Z' || state == 'X' {
		return false
	}
	want := name
	if len(want) > 15 {
		want = want[:15]
	}
	return comm == want
}

// stopPID sends SIGTERM, then SIGKILL after stopGrace, and waits until the
// process is gone. done, when not nil, is closed once our child is reaped.
func stopPID(name string, pid int, done <-chan struct{}) error {
	gone := func() bool {
		if done != nil {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		return !Alive(name, pid)
	}
	if gone() {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitGone(gone, stopGrace) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if waitGone(gone, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) still running after SIGKILL", name, pid)
}

// waitGone polls gone until it is true or d has passed.
func waitGone(gone func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !gone() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// StopFromDir stops every component recorded in dir/pids (last started first,
// so etcd goes last) and verifies each is gone; a real node is torn down
// first, and the host checked, as Stop does. It does not remove dir.
func StopFromDir(dir string) error {
	pids, err := ReadPIDs(dir)
	if err != nil {
		return err
	}
	var errs []error
	// The real node's processes first, while the kube-apiserver still runs;
	// its host changes last (the kube-apiserver listens on its bridge).
	finishNode, err := stopNodeFromDir(dir, pids)
	if err != nil {
		errs = append(errs, err)
	}
	for i := len(pids) - 1; i >= 0; i-- {
		if err := stopPID(pids[i].Name, pids[i].PID, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if finishNode != nil {
		errs = append(errs, finishNode())
	}
	return errors.Join(errs...)
}

// LogTail returns the last n lines of a component's log.
func (c *Cluster) LogTail(component string, n int) string {
	return tailFile(filepath.Join(c.Dir, component+".log"), n)
}

// tailFile returns the last n lines of a file ("" when unreadable).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (p NamedPID) String() string { return fmt.Sprintf("%s=%d", p.Name, p.PID) }
