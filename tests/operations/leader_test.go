package operations

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// leaseSettings are the operator's Lease timings for one run of the failover
// scenario.
type leaseSettings struct {
	name                string
	lease, renew, retry time.Duration
	flags               []string // nil: the operator's defaults
}

// TestLeaderElection runs two operator replicas with leader election, as the
// Deployment in config/manager does, and checks that exactly one reconciles;
// that when the leader is SIGKILLed (a crashed pod, no Lease release) the
// other takes the Lease over once it expires and reconciles a change made
// during the outage; and that a SIGTERMed leader (a rolling update) hands
// over at once because it releases the Lease. It measures both takeovers,
// with short test timings and with the operator's defaults (15s/10s/2s).
func TestLeaderElection(t *testing.T) {
	for _, s := range []leaseSettings{
		{name: "short", lease: 4 * time.Second, renew: 3 * time.Second, retry: time.Second, flags: []string{
			"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s",
		}},
		{name: "default", lease: 15 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second},
	} {
		t.Run(s.name, func(t *testing.T) { failover(t, s) })
	}
}

func failover(t *testing.T, s leaseSettings) {
	ns := testkit.Namespace(t, env.C, testkit.NS{Name: "ops-leader-" + s.name})
	args := append([]string{"--leader-elect=true", "--leader-election-namespace=" + operatortest.Namespace}, s.flags...)
	ops := []*operator{startOperator(t, s.name+"-a", args...), startOperator(t, s.name+"-b", args...)}
	for _, op := range ops {
		op.waitReady(t)
	}

	// Exactly one acquires the Lease (a crashed run of an earlier subtest may
	// hold it for up to one lease duration).
	var leader, follower *operator
	var holder1 string
	testkit.WaitFor(t, 2*time.Minute+s.lease, "one of two operators to acquire the Lease", func(ctx context.Context) (bool, string) {
		l, err := lease(ctx)
		if err != nil {
			return false, err.Error()
		}
		var acquired []*operator
		for _, op := range ops {
			if firstLine(op.lines(t), isAcquired) > 0 {
				acquired = append(acquired, op)
			}
		}
		if len(acquired) > 1 {
			t.Fatalf("both operators logged %q", "Successfully acquired lease")
		}
		if len(acquired) == 0 || holder(l) == "" {
			return false, fmt.Sprintf("holder %q, %d operators acquired", holder(l), len(acquired))
		}
		leader = acquired[0]
		follower = ops[0]
		if leader == ops[0] {
			follower = ops[1]
		}
		holder1 = holder(l)
		if got, want := ptr.Deref(l.Spec.LeaseDurationSeconds, 0), int32(s.lease.Seconds()); got != want {
			t.Fatalf("Lease leaseDurationSeconds %d, want %d", got, want)
		}
		return true, ""
	})
	t.Logf("leader: %s (Lease holder %s), follower: %s", leader.Name(), holder1, follower.Name())
	waitLeaderGauge(t, leader, 1)
	waitLeaderGauge(t, follower, 0)

	// Only the leader reconciles.
	app := newApp(ns, "web", 1, "")
	if err := env.C.Create(t.Context(), app); err != nil {
		t.Fatal(err)
	}
	waitAppReady(t, ns, app.Name, 1, "")
	if firstLine(leader.lines(t), isReconcileOf(ns, app.Name)) == 0 {
		t.Errorf("the leader %s logged no reconcile of %s/%s", leader.Name(), ns, app.Name)
	}
	if n := firstLine(follower.lines(t), isReconcile); n > 0 {
		t.Errorf("the follower %s reconciled (log line %d) while %s led", follower.Name(), n, leader.Name())
	}

	// The leader crashes: the Lease is not released, so the follower waits
	// until it expires. A change made meanwhile is reconciled after takeover.
	leader.Kill()
	killed := time.Now()
	gen := updateApp(t, ns, app.Name, func(swa *webappv1.SimpleWebApp) { swa.Spec.Replicas = ptr.To[int32](2) })
	var toHolder, toApplied time.Duration
	var holder2 string
	testkit.WaitFor(t, 2*time.Minute+s.lease, "the follower to take the Lease over and apply replicas=2", func(ctx context.Context) (bool, string) {
		if toHolder == 0 {
			if l, err := lease(ctx); err == nil && holder(l) != "" && holder(l) != holder1 {
				toHolder, holder2 = time.Since(killed), holder(l)
			}
		}
		ok, seen := appState(ctx, ns, app.Name, gen, "")
		if toApplied == 0 {
			if n, err := deploymentReplicas(ctx, ns, app.Name); err == nil && n == 2 && ok {
				toApplied = time.Since(killed)
			}
		}
		return toHolder > 0 && toApplied > 0, fmt.Sprintf("new holder after %s, applied after %s; %s", toHolder, toApplied, seen)
	})
	acquiredAt := firstLine(follower.lines(t), isAcquired)
	if acquiredAt == 0 {
		t.Fatalf("%s holds the Lease but %s did not log %q", holder2, follower.Name(), "Successfully acquired lease")
	}
	if n := firstLine(follower.lines(t), isReconcile); n < acquiredAt {
		t.Errorf("%s reconciled at log line %d, before it acquired the Lease at line %d", follower.Name(), n, acquiredAt)
	}
	if firstLine(follower.lines(t), isReconcileOf(ns, app.Name)) == 0 {
		t.Errorf("%s applied the change but logged no reconcile of %s/%s", follower.Name(), ns, app.Name)
	}
	waitLeaderGauge(t, follower, 1)

	// The follower polls the Lease every retry × [1, 1+JitterFactor]. It counts
	// the lease duration from the poll at which it first saw the leader's last
	// renewal (often the first poll after the crash) and takes the Lease at its
	// first poll after that: between lease − 2.2 × retry and lease + 4.4 × retry
	// after the crash, typically lease + about one retry. The upper bound has
	// slack for a loaded 2-core machine.
	jitter := time.Duration((1 + leaderelection.JitterFactor) * float64(s.retry))
	lo, hi := s.lease-jitter-500*time.Millisecond, s.lease+2*jitter+15*time.Second
	t.Logf("SIGKILL of the leader (lease %s, renew %s, retry %s): new Lease holder after %s, the change made at the kill applied after %s (expected takeover %s-%s, typically %s-%s)",
		s.lease, s.renew, s.retry, toHolder.Round(time.Millisecond), toApplied.Round(time.Millisecond), s.lease-jitter, s.lease+2*jitter, s.lease, s.lease+jitter)
	if toHolder < lo || toHolder > hi {
		t.Errorf("takeover after %s, want between %s and %s", toHolder, lo, hi)
	}

	// A rolling update: a new replica joins, then the leader gets SIGTERM. It
	// releases the Lease (LeaderElectionReleaseOnCancel), so the candidate
	// takes it at its next retry instead of after a lease duration.
	survivor := follower
	candidate := startOperator(t, s.name+"-c", args...)
	candidate.waitReady(t)
	testkit.WaitFor(t, time.Minute, candidate.Name()+" to try to acquire the Lease", func(context.Context) (bool, string) {
		return firstLine(candidate.lines(t), func(l logLine) bool { return l.msg() == "Attempting to acquire leader lease..." }) > 0, candidate.LogTail(5)
	})
	waitLeaderGauge(t, candidate, 0)
	terminated := time.Now()
	survivor.terminate(t)
	toExit := time.Since(terminated)
	var toHandover time.Duration
	testkit.WaitFor(t, time.Minute+s.lease, candidate.Name()+" to take the released Lease", func(ctx context.Context) (bool, string) {
		l, err := lease(ctx)
		if err != nil {
			return false, err.Error()
		}
		if h := holder(l); h != "" && h != holder2 {
			toHandover = time.Since(terminated)
			return true, ""
		}
		return false, "holder " + holder(l)
	})
	if firstLine(candidate.lines(t), isAcquired) == 0 {
		t.Errorf("%s holds the Lease but logged no %q", candidate.Name(), "Successfully acquired lease")
	}
	t.Logf("SIGTERM of the leader: it exited after %s, new Lease holder after %s (expected within about %s of the release)",
		toExit.Round(time.Millisecond), toHandover.Round(time.Millisecond), jitter)
	if toHandover > jitter+15*time.Second {
		t.Errorf("handover after a graceful stop took %s, want about %s at most: was the Lease released?", toHandover, jitter)
	}
	gen = updateApp(t, ns, app.Name, func(swa *webappv1.SimpleWebApp) { swa.Spec.Replicas = ptr.To[int32](1) })
	testkit.WaitFor(t, 2*time.Minute, candidate.Name()+" to apply replicas=1", func(ctx context.Context) (bool, string) {
		ok, seen := appState(ctx, ns, app.Name, gen, "")
		n, err := deploymentReplicas(ctx, ns, app.Name)
		return ok && err == nil && n == 1, seen
	})

	// The last one stops cleanly and leaves the Lease free.
	candidate.terminate(t)
	l, err := lease(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if h := holder(l); h != "" {
		t.Errorf("after the last operator stopped gracefully the Lease is still held by %q", h)
	}
}

// waitLeaderGauge waits until the operator's leader_election_master_status
// is want (1 leader, 0 candidate).
func waitLeaderGauge(t *testing.T, op *operator, want float64) {
	t.Helper()
	testkit.WaitFor(t, time.Minute, fmt.Sprintf("%s leader_election_master_status %v", op.Name(), want), func(context.Context) (bool, string) {
		ss, err := op.metrics()
		if err != nil {
			return false, err.Error()
		}
		v, ok := ss.get("leader_election_master_status", nil)
		return ok && v == want, "present " + strconv.FormatBool(ok) + ", value " + strconv.FormatFloat(v, 'g', -1, 64)
	})
}
