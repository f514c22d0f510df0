package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// leaseName is main.go's LeaderElectionID.
const leaseName = "simplewebapp-operator.example.com"

// TestLeaderSplitBrain runs two replicas with leader election, each with its
// own ServiceAccount so the audit log tells them apart, while SimpleWebApps
// keep changing. The leader is SIGSTOPped past its Lease, the other takes
// over, then the old leader is continued: from the audit log, it makes no
// write after the new leader's first write (its paused reconciles would, but
// the Lease fence refuses them), and it exits.
func TestLeaderSplitBrain(t *testing.T) {
	pause := time.Duration(size(t, "leader pause seconds", 30, 30)) * time.Second
	apps := size(t, "SimpleWebApps changing during the pause", 5, 20)
	lease := []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"}
	if full() {
		lease = nil // the operator's defaults: 15s, 10s, 2s
	}
	t.Logf("SIZE lease flags %v (nil: the defaults 15s/10s/2s)", lease)
	e := newEnv(t)
	ctx := t.Context()
	ns := testkit.Namespace(t, e.C, testkit.NS{Prefix: "split-", WaitForServiceAccount: true})

	ids := map[string]*operatortest.Identity{}
	for _, name := range []string{"replica-a", "replica-b"} {
		id, err := e.NewReplicaIdentity(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	var checks []operatortest.CanIWant
	for _, id := range ids {
		checks = append(checks,
			operatortest.CanIWant{Kubeconfig: id.Kubeconfig, Args: []string{"update", "leases.coordination.k8s.io", "-n", operatortest.Namespace}, Want: "yes"},
			operatortest.CanIWant{Kubeconfig: id.Kubeconfig, Args: []string{"patch", "deployments.apps", "-n", ns}, Want: "yes"})
	}
	if err := e.Kubectl.WaitCanI(ctx, time.Minute, checks...); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--leader-elect=true", "--leader-election-namespace=" + operatortest.Namespace}, lease...)
	ops := map[string]*operatortest.Operator{}
	for name, id := range ids {
		ops[name] = e.start(name, id, nil, args...)
	}

	diag := testkit.Diag(func() string {
		var b strings.Builder
		for name, op := range ops {
			fmt.Fprintf(&b, "--- %s log tail ---\n%s\n", name, op.LogTail(20))
		}
		return b.String()
	})
	names := e.createApps(ctx, ns, apps, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Message: "v0"})
	stable := testkit.ChannelVersion(t, "stable")
	testkit.WaitFor(t, 2*time.Minute, "every SimpleWebApp Ready under the first leader", func(ctx context.Context) (bool, string) {
		return converged(ctx, e.C, ns, stable)
	}, testkit.Every(200*time.Millisecond), diag)

	// The leader: the replica whose user wrote the Lease successfully.
	leaseWrites := func(user string, events []testkit.AuditEvent) []testkit.AuditEvent {
		return testkit.AuditFilter{User: user, Resource: "leases", Namespace: operatortest.Namespace, Name: leaseName,
			Verbs: testkit.WriteVerbs, Succeeded: true}.Filter(events)
	}
	var leader, follower string
	for name, id := range ids {
		if len(leaseWrites(id.User(), e.audit())) > 0 {
			leader = name
		} else {
			follower = name
		}
	}
	if leader == "" || follower == "" {
		t.Fatalf("want exactly one replica writing the Lease; leader %q, follower %q", leader, follower)
	}
	t.Logf("leader %s (pid %d), follower %s", leader, ops[leader].Pid(), follower)

	// Changes keep coming, so the leader is mid-reconcile when it stops.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
		for i := 1; ; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			n := names[rng.IntN(len(names))]
			swa := &webappv1.SimpleWebApp{}
			swa.Namespace, swa.Name = ns, n
			_ = e.C.Patch(loadCtx, swa, clientMergePatch(fmt.Sprintf(`{"spec":{"message":"v%d"}}`, i)))
		}
	}()
	t.Cleanup(func() { stopLoad(); wg.Wait() })
	testkit.WaitFor(t, 30*time.Second, "the leader writing under load", func(context.Context) (bool, string) {
		n := testkit.AuditFilter{User: ids[leader].User(), Namespace: ns, Verbs: testkit.WriteVerbs, Succeeded: true}.Count(e.audit())
		return n > apps*3, fmt.Sprintf("%d writes", n)
	}, testkit.Every(200*time.Millisecond))

	// SIGSTOP (by PID) the leader; the follower takes over.
	stopped := time.Now()
	if err := syscall.Kill(ops[leader].Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	contd := false
	defer func() {
		if !contd {
			_ = syscall.Kill(ops[leader].Pid(), syscall.SIGCONT)
		}
	}()
	var takeover time.Duration
	testkit.WaitFor(t, pause, follower+" acquires the Lease and writes", func(context.Context) (bool, string) {
		events := e.audit()
		n := len(leaseWrites(ids[follower].User(), events))
		w := testkit.AuditFilter{User: ids[follower].User(), Namespace: ns, Verbs: testkit.WriteVerbs, Succeeded: true}.Count(events)
		takeover = time.Since(stopped)
		return n > 0 && w > 0, fmt.Sprintf("%d Lease writes, %d writes in %s", n, w, ns)
	}, testkit.Every(100*time.Millisecond))
	// The rest of the pause: the stopped leader can write nothing.
	testkit.HoldsFor(t, max(pause-time.Since(stopped), time.Second), "the stopped leader writes nothing", func(context.Context) (bool, string) {
		n := testkit.AuditFilter{User: ids[leader].User(), Verbs: testkit.WriteVerbs, From: stopped.Add(time.Second)}.Count(e.audit())
		return n == 0, fmt.Sprintf("%d writes", n)
	}, testkit.Every(time.Second))
	if err := syscall.Kill(ops[leader].Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	contd = true
	continued := time.Now()

	// The old leader finds its Lease gone and exits.
	var exitedAfter time.Duration
	testkit.WaitFor(t, time.Minute, "the old leader "+leader+" exits", func(context.Context) (bool, string) {
		exited, err := ops[leader].Exited()
		exitedAfter = time.Since(continued)
		return exited, fmt.Sprint(err)
	}, testkit.Every(50*time.Millisecond))
	_, exitErr := ops[leader].Exited()
	stopLoad()
	wg.Wait()
	testkit.WaitFor(t, 2*time.Minute, "every SimpleWebApp converged under the new leader", func(ctx context.Context) (bool, string) {
		return converged(ctx, e.C, ns, stable)
	}, testkit.Every(200*time.Millisecond), diag)

	events := e.audit()
	newFirst := testkit.AuditFilter{User: ids[follower].User(), Verbs: testkit.WriteVerbs, Succeeded: true, From: stopped}.Filter(events)
	if len(newFirst) == 0 {
		t.Fatal("no write by the new leader in the audit log")
	}
	first := testkit.Received(&newFirst[0])
	// Every write of the old leader after that: its Lease (renew attempts,
	// refused by the API server) and the leader election Event are the
	// elector's own and not state the operator manages.
	var late []testkit.AuditEvent
	for _, ev := range (testkit.AuditFilter{User: ids[leader].User(), Verbs: testkit.WriteVerbs, From: first}).Filter(events) {
		if ev.ObjectRef != nil && (ev.ObjectRef.Resource == "leases" || ev.ObjectRef.Resource == "events" && ev.ObjectRef.Namespace == operatortest.Namespace) {
			continue
		}
		late = append(late, ev)
	}
	oldAll := testkit.AuditFilter{User: ids[leader].User(), Verbs: testkit.WriteVerbs, From: first}.Filter(events)
	t.Logf("FIGURE leader split-brain: leader SIGSTOPped %s; %s took over (first Lease write and write) %.1f s after the stop; old leader continued, exited %.1f s later (%v); its writes after the new leader's first: %d (all requests incl. its Lease and election events: %d %v)",
		pause, follower, takeover.Seconds(), exitedAfter.Seconds(), exitErr, len(late), len(oldAll), testkit.CountBy(oldAll, testkit.AuditByObject))
	if len(late) > 0 {
		t.Errorf("the old leader wrote %d times after the new leader's first write (%s):\n%s", len(late), first.Format("15:04:05.000000"), testkit.FormatAudit(late, 40))
	}
	t.Logf("old leader log tail:\n%s", ops[leader].LogTail(15))
}
