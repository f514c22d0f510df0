package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The node lock: one real node per machine (fixed bridge, cgroup and state
// names; kube-proxy owns host chains). Test packages that start one in
// parallel under `go test ./...` wait for each other.
//
// It is an flock on nodeLockFile, held by the Go process that starts the
// node until Stop (the kernel drops it when that process dies). A detached
// cluster (localcluster up) outlives the process that started it, so before
// that process exits it writes an owner record into the file: "detached
// <cluster dir> <name>=<pid>...", the node's containerd and kubelet. Whoever
// takes the flock later treats the lock as still held while one of those
// processes is alive, and StopFromDir takes the flock, tears the node down
// and clears the record.

// nodeLockFile is in /run/lock (tmpfs: gone at reboot, like any owner).
func nodeLockFile() string {
	if st, err := os.Stat("/run/lock"); err == nil && st.IsDir() {
		return "/run/lock/swa-real-node.lock"
	}
	return "/tmp/swa-real-node.lock"
}

// nodeLock is a held node lock. A borrowed one is LockRealNode's: Start uses
// it and leaves its release to LockRealNode's caller.
type nodeLock struct {
	f        *os.File
	borrowed bool
}

// outerLock is the lock that LockRealNode took, if any.
var outerLock struct {
	sync.Mutex
	l *nodeLock
}

// LockRealNode takes the machine's real-node lock (waiting, bounded by ctx)
// for a caller that needs the host to itself for longer than a cluster
// runs: a test that records the host before Start and compares it after
// Stop. A ProfileNode Start in this process then uses this lock instead of
// waiting for it. unlock lets it go.
func LockRealNode(ctx context.Context, log io.Writer) (unlock func() error, err error) {
	l, err := waitNodeLock(ctx, log, "(LockRealNode)")
	if err != nil {
		return nil, err
	}
	outerLock.Lock()
	outerLock.l = l
	outerLock.Unlock()
	return func() error {
		outerLock.Lock()
		defer outerLock.Unlock()
		outerLock.l = nil
		return l.release()
	}, nil
}

// acquireNodeLock waits, bounded by ctx, until the node lock is free and
// takes it for the cluster in dir; under LockRealNode it borrows that.
func acquireNodeLock(ctx context.Context, log io.Writer, dir string) (*nodeLock, error) {
	outerLock.Lock()
	outer := outerLock.l
	outerLock.Unlock()
	if outer != nil {
		return &nodeLock{f: outer.f, borrowed: true}, nil
	}
	return waitNodeLock(ctx, log, dir)
}

// waitNodeLock takes the flock of the node lock, waiting while another
// process or a live detached owner holds it.
func waitNodeLock(ctx context.Context, log io.Writer, dir string) (*nodeLock, error) {
	said := ""
	for {
		l, holder, err := tryNodeLock(dir)
		if err != nil || l != nil {
			return l, err
		}
		if holder != said {
			fmt.Fprintf(log, "cluster: waiting for the real-node lock held by %s\n", holder)
			said = holder
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the real-node lock (%s) held by %s: %w", nodeLockFile(), holder, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tryNodeLock takes the lock if it is free; else it says who holds it.
func tryNodeLock(dir string) (*nodeLock, string, error) {
	f, err := os.OpenFile(nodeLockFile(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, "", err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		rec, _ := io.ReadAll(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, describeOwner(string(rec)), nil
		}
		return nil, "", fmt.Errorf("flock %s: %w", nodeLockFile(), err)
	}
	rec, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, "", err
	}
	if owner, alive := detachedOwner(string(rec)); alive && owner != dir {
		f.Close()
		return nil, describeOwner(string(rec)), nil
	}
	l := &nodeLock{f: f}
	return l, "", l.record("pid " + strconv.Itoa(os.Getpid()) + " " + dir)
}

// record replaces the lock file's content.
func (l *nodeLock) record(s string) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(s+"\n"), 0)
	return err
}

// detach writes the owner record of a detached cluster in dir whose node
// processes are pids, and lets go of the flock.
func (l *nodeLock) detach(dir string, pids map[string]int) error {
	rec := "detached " + dir
	for _, name := range []string{Containerd, Kubelet} {
		if pid := pids[name]; pid > 0 {
			rec += fmt.Sprintf(" %s=%d", name, pid)
		}
	}
	err := l.record(rec)
	if l.borrowed {
		return err
	}
	return errors.Join(err, l.f.Close())
}

// release clears the record and lets go of the flock.
func (l *nodeLock) release() error {
	if l == nil || l.f == nil || l.borrowed {
		return nil
	}
	err := l.record("")
	err = errors.Join(err, l.f.Close())
	l.f = nil
	return err
}

// detachedOwner returns the cluster dir of a detached owner record and
// whether one of its node processes is still alive.
func detachedOwner(rec string) (string, bool) {
	f := strings.Fields(rec)
	if len(f) < 2 || f[0] != "detached" {
		return "", false
	}
	for _, np := range f[2:] {
		name, pidStr, ok := strings.Cut(np, "=")
		pid, err := strconv.Atoi(pidStr)
		if ok && err == nil && Alive(name, pid) {
			return f[1], true
		}
	}
	return f[1], false
}

// describeOwner turns a lock record into "pid N (cluster DIR)".
func describeOwner(rec string) string {
	f := strings.Fields(rec)
	switch {
	case len(f) >= 3 && f[0] == "pid":
		return "pid " + f[1] + " (cluster " + f[2] + ")"
	case len(f) >= 3 && f[0] == "detached":
		_, pid, _ := strings.Cut(f[2], "=")
		return "pid " + pid + " of the detached cluster " + f[1] + " (localcluster down stops it)"
	}
	return "another process"
}
