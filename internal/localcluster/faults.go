package localcluster

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Faults for chaos tests. Components are found by the PID this Cluster
// started, never by name, so no process outside the cluster is touched.

// Restart stops a component (SIGTERM, SIGKILL after a grace period), starts
// it again with the same flags, ports and data, and waits until it is ready
// (etcd /health, kube-apiserver /readyz, the controllers' /healthz; kwok:
// started). It returns how long the component was down.
func (c *Cluster) Restart(ctx context.Context, component string) (time.Duration, error) {
	i, p := c.find(component)
	if p == nil {
		return 0, fmt.Errorf("restart: no component %q in this cluster", component)
	}
	t0 := time.Now()
	if err := stopPID(p.name, p.pid, p.done); err != nil {
		return 0, fmt.Errorf("restart %s: %w", component, err)
	}
	np, err := startProcSpec(c.Dir, p, c.detach)
	if err != nil {
		return 0, err
	}
	c.procs[i] = np
	c.PIDs[component] = np.pid
	if err := writePIDs(c.Dir, c.procs); err != nil {
		return 0, err
	}
	if ready := c.ready[component]; ready != nil {
		if err := c.waitComponent(ctx, component, component+" ready after a restart", 90*time.Second, func(ctx context.Context) (bool, error) {
			return ready(ctx), nil
		}); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// Signal sends sig to a component's process, e.g. SIGSTOP to freeze etcd
// and SIGCONT to let it go on. A component left stopped is still stopped by
// Stop (with SIGKILL once SIGTERM had no effect).
func (c *Cluster) Signal(component string, sig syscall.Signal) error {
	_, p := c.find(component)
	if p == nil {
		return fmt.Errorf("signal: no component %q in this cluster", component)
	}
	if p.exited() {
		return fmt.Errorf("signal %s: %s (pid %d) has exited", sig, component, p.pid)
	}
	return syscall.Kill(p.pid, sig)
}

func (c *Cluster) find(component string) (int, *proc) {
	for i, p := range c.procs {
		if p.name == component {
			return i, p
		}
	}
	return -1, nil
}
