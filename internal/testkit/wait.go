// Package testkit holds the helpers that every test package shares, each defined
// once:
//
//   - waits: Poll (returns an error), WaitFor (fails the test) and HoldsFor
//     (an assertion over a window of time), with the options Every, Diag and
//     Abort;
//   - namespaces: Namespace, with optional Pod Security labels;
//   - roll-outs: DeploymentRolledOut;
//   - channels: the versions the embedded channel files decide (Versions,
//     ChannelVersion, NewVersion) and writers of channel files and package
//     versions (WriteChannel, WriteChannelFile, CopyPackage, MarkVersion) into
//     a directory on disk (DirTree) or an fstest.MapFS (MapTree, Embedded).
//
// Tests never sleep to synchronise: they poll with a deadline, and on timeout
// they say what they waited for, what they saw last and the diagnostics they
// were given.
package testkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// DefaultInterval is how often WaitFor and HoldsFor poll unless Every says
// otherwise.
const DefaultInterval = 50 * time.Millisecond

// Poll calls cond every interval until it is done, for at most timeout, and
// returns how long that took and what cond saw last. The error is the
// timeout's, the context's, or cond's own, which ends the wait at once. It is
// the wait for code that returns errors instead of failing a test.
func Poll(ctx context.Context, interval, timeout time.Duration,
	cond func(ctx context.Context) (done bool, seen string, err error)) (time.Duration, string, error) {
	start := time.Now()
	var seen string
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		done, s, err := cond(ctx)
		if err != nil {
			return false, err
		}
		seen = s
		return done, nil
	})
	return time.Since(start), seen, err
}

// WaitOption changes how WaitFor and HoldsFor poll and what they report.
type WaitOption func(*waitConfig)

type waitConfig struct {
	interval time.Duration
	diags    []func() string
	aborts   []func() error
}

// Every sets the poll interval (default DefaultInterval).
func Every(d time.Duration) WaitOption { return func(c *waitConfig) { c.interval = d } }

// Diag adds diagnostics (logs, kubectl output) to the failure message; diag
// runs only when the test fails.
func Diag(diag func() string) WaitOption {
	return func(c *waitConfig) { c.diags = append(c.diags, diag) }
}

// Abort is checked before every poll: an error ends the wait at once and
// fails the test with it, for example when a process the test needs exited.
func Abort(check func() error) WaitOption {
	return func(c *waitConfig) { c.aborts = append(c.aborts, check) }
}

// Options combines options into one, for a test package's standard set.
func Options(opts ...WaitOption) WaitOption {
	return func(c *waitConfig) {
		for _, o := range opts {
			o(c)
		}
	}
}

func newWaitConfig(opts []WaitOption) *waitConfig {
	c := &waitConfig{interval: DefaultInterval}
	for _, o := range opts {
		o(c)
	}
	return c
}

func (c *waitConfig) aborted() error {
	for _, check := range c.aborts {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *waitConfig) diagnostics() string {
	var b strings.Builder
	for _, d := range c.diags {
		if s := d(); s != "" {
			b.WriteString("\n")
			b.WriteString(strings.TrimRight(s, "\n"))
		}
	}
	return b.String()
}

// WaitFor polls cond until it reports done, for at most timeout, and returns
// how long that took. cond says what it sees. On timeout (or an Abort) the
// test fails with what it waited for, the last thing cond saw and the
// diagnostics. cond runs on the test's goroutine, so it may call t.Fatal
// itself for a state that no waiting can fix.
func WaitFor(t testing.TB, timeout time.Duration, what string,
	cond func(ctx context.Context) (done bool, seen string), opts ...WaitOption) time.Duration {
	t.Helper()
	c := newWaitConfig(opts)
	took, seen, err := Poll(t.Context(), c.interval, timeout, func(ctx context.Context) (bool, string, error) {
		if err := c.aborted(); err != nil {
			return false, "", err
		}
		done, seen := cond(ctx)
		return done, seen, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v\nlast seen: %s%s", took.Round(time.Millisecond), what, err, seen, c.diagnostics())
	}
	t.Logf("%s after %s", what, took.Round(time.Millisecond))
	return took
}

// HoldsFor checks cond every poll interval for the whole of window: an
// assertion over time (nothing is waited for). The test fails at the first
// poll where cond does not hold, with what it saw and the diagnostics. It
// returns the number of polls.
func HoldsFor(t testing.TB, window time.Duration, what string,
	cond func(ctx context.Context) (ok bool, seen string), opts ...WaitOption) int {
	t.Helper()
	c := newWaitConfig(opts)
	start := time.Now()
	polls := 0
	var broken string
	err := wait.PollUntilContextTimeout(t.Context(), c.interval, window, true, func(context.Context) (bool, error) {
		if err := c.aborted(); err != nil {
			return false, err
		}
		// Not the poll's context: its deadline, the end of the window, is no
		// reason for a read to fail.
		ok, seen := cond(t.Context())
		if !ok {
			broken = seen
			return false, errors.New("condition broken")
		}
		polls++
		return false, nil
	})
	if broken != "" {
		t.Fatalf("after %s (poll %d), no longer %s:\n%s%s",
			time.Since(start).Round(time.Millisecond), polls+1, what, broken, c.diagnostics())
	}
	if !wait.Interrupted(err) {
		t.Fatalf("checking %s: %v%s", what, err, c.diagnostics())
	}
	t.Logf("%s held for %s (%d polls)", what, window, polls)
	return polls
}
