package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// The client network namespace: a veth on the node's bridge, as a pod would
// have, with a route to the Service range only. RealNode.HTTPClient dials
// from it, so a test reaches pod IPs and ClusterIPs (through kube-proxy)
// exactly as pods do, and nothing else.

// clientNetnsPath is where the namespace is bind-mounted (under the state
// directory, not /run/netns), so that it outlives this process for a
// detached cluster and teardown finds it.
func (n *RealNode) clientNetnsPath() string { return n.path("netns", "client") }

// createClientNetns creates the client namespace and its veth.
func (n *RealNode) createClientNetns() error {
	target := n.clientNetnsPath()
	if err := os.MkdirAll(n.path("netns"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		return err
	}
	if err := onNewThread(func() error {
		// Only this thread moves to the new namespace; onNewThread keeps it
		// from running anything else unless it is back in ours.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		return unix.Mount("/proc/thread-self/ns/net", target, "", unix.MS_BIND, "")
	}); err != nil {
		return err
	}
	// ip(8) takes a path for "netns" where a name would be looked up in
	// /run/netns.
	if err := run("ip", "link", "add", clientVeth, "type", "veth", "peer", "name", "eth0", "netns", target); err != nil {
		return err
	}
	if err := run("ip", "link", "set", clientVeth, "master", nodeBridge, "up"); err != nil {
		return err
	}
	return n.inClientNetns(func() error {
		for _, args := range [][]string{
			{"addr", "add", clientIP + "/24", "dev", "eth0"},
			{"link", "set", "eth0", "up"},
			{"link", "set", "lo", "up"},
			{"route", "add", n.serviceCIDR, "via", n.IP},
		} {
			// A child started from this thread starts in its namespace.
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v in the client netns: %w: %s", args, err, out)
			}
		}
		return nil
	})
}

// inClientNetns runs f on a thread that is in the client namespace.
func (n *RealNode) inClientNetns(f func() error) error {
	return onNewThread(func() error {
		fd, err := unix.Open(n.clientNetnsPath(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns %s: %w", n.clientNetnsPath(), err)
		}
		return f()
	})
}

// onNewThread runs f in a goroutine locked to its OS thread and then puts
// the thread back into this process's network namespace. If that fails the
// goroutine exits still locked, and the Go runtime ends the thread, so no
// other goroutine ever runs in a foreign namespace.
func onNewThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		err = f()
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("back to our netns: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// HTTPClient returns a client whose connections are made from the client
// network namespace on the node's bridge: it reaches pod IPs and ClusterIPs,
// nothing else; URLs must name IP addresses (there is no DNS). keepAlives
// false makes every request a new connection (a new Service backend choice).
func (n *RealNode) HTTPClient(keepAlives bool) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         n.DialContext,
			DisableKeepAlives:   !keepAlives,
			TLSHandshakeTimeout: 10 * time.Second,
		},
	}
}

// DialContext connects from the client network namespace. The socket is
// created there by a thread that has entered it; a socket keeps its
// namespace, so the connection is used from any goroutine afterwards.
func (n *RealNode) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.inClientNetns(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr) // socket(2) runs on this thread
		return err
	})
	if err != nil && conn != nil {
		conn.Close()
		conn = nil
	}
	return conn, err
}
