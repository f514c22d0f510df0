package localcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// waitComponent is the start-up wait for one component: it polls cond every
// 100ms until it is true, timeout passes or the component exits. The error
// names what it waited for and ends with the component's last log lines.
// (Tests wait with internal/testkit, which sits above this package; the cluster
// starter for `make cluster-up` does not link the test kit.)
func (c *Cluster) waitComponent(ctx context.Context, component, what string, timeout time.Duration,
	cond func(context.Context) (bool, error)) error {
	var p *proc
	for _, q := range c.procs {
		if q.name == component {
			p = q
		}
	}
	t0 := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if p != nil && p.exited() {
			return false, fmt.Errorf("%s exited", component)
		}
		return cond(ctx)
	})
	if err != nil {
		if ctx.Err() != nil { // cancelled by the caller: the log is not the story
			return fmt.Errorf("waiting for %s (%s): %w", what, since(t0), ctx.Err())
		}
		return fmt.Errorf("waiting for %s (%s): %w\n--- last lines of %s.log ---\n%s",
			what, since(t0), err, component, c.LogTail(component, 40))
	}
	fmt.Fprintf(c.log, "cluster: %s (waited %s)\n", what, since(t0))
	return nil
}

// httpOK reports whether a GET of url answers 200 OK.
func httpOK(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// since is the time since t, rounded for progress lines.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
