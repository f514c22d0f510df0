package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// failpoint is the operator's test-only failpoint (failpoints.go, in a build
// with -tags failpoints): exit 137 after the k-th write.
const failpoint = "SWA_TEST_EXIT_AFTER_WRITES"

// crasher keeps one operator running: with the failpoint at a random k until
// the planned crashes happened, then without.
type crasher struct {
	e       *chaosEnv
	planned int
	maxK    int
	rng     *rand.Rand

	mu        sync.Mutex
	crashes   int
	lastCrash time.Time
	running   *operatortest.Operator
	clean     bool // running has no failpoint
	err       error
	stopping  bool
	stop      chan struct{}
	done      chan struct{}
}

func (c *crasher) run() {
	defer close(c.done)
	for n := 0; ; n++ {
		c.mu.Lock()
		clean := c.crashes >= c.planned || c.stopping
		c.mu.Unlock()
		var env []string
		name := fmt.Sprintf("operator-%02d", n)
		if !clean {
			k := 1 + c.rng.IntN(c.maxK)
			env = []string{fmt.Sprintf("%s=%d", failpoint, k)}
			name += fmt.Sprintf("-k%d", k)
		}
		op, err := operatortest.Start(operatortest.Config{
			Name: name, Bin: c.e.bin, Kubeconfig: c.e.id.Kubeconfig, OutOfCluster: true, Env: env,
			LogPath: filepath.Join(c.e.Dir, name+".log"),
			Args:    []string{"--metrics-bind-address=0", "--leader-elect=false"},
		})
		c.mu.Lock()
		c.running, c.clean, c.err = op, clean, err
		c.mu.Unlock()
		if err != nil {
			return
		}
		if clean {
			<-c.stop
			op.Kill()
			return
		}
		tick := time.NewTicker(20 * time.Millisecond)
		for exited := false; !exited; {
			select {
			case <-c.stop:
				tick.Stop()
				op.Kill()
				return
			case <-tick.C:
				var werr error
				exited, werr = op.Exited()
				if exited {
					c.mu.Lock()
					if code := exitCode(werr); code == 137 {
						c.crashes++
						c.lastCrash = time.Now()
					} else if !c.stopping {
						c.err = fmt.Errorf("operator %s exited with %v, not by the failpoint; log tail:\n%s", name, werr, op.LogTail(30))
					}
					c.mu.Unlock()
				}
			}
		}
		tick.Stop()
		c.mu.Lock()
		failed := c.err != nil
		c.mu.Unlock()
		if failed {
			return
		}
	}
}

// finish stops injecting: a failpoint operator still running is killed
// (SIGKILL, a crash too) and a clean one started.
func (c *crasher) finish(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	c.stopping = true
	op, clean := c.running, c.clean
	c.mu.Unlock()
	if !clean && op != nil {
		op.Kill()
	}
	testkit.WaitFor(t, time.Minute, "an operator without the failpoint running", func(context.Context) (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.clean && c.running != nil, fmt.Sprintf("clean=%v err=%v", c.clean, c.err)
	}, testkit.Abort(c.failed))
}

func (c *crasher) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *crasher) counts() (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashes, c.lastCrash
}

// TestCrashConsistency crashes the operator (exit 137 right after a random
// k-th write, wherever in a reconcile that falls) over and over while
// SimpleWebApps go stable → rapid (or another pinned version) → stable and change their message, and
// restarts it each time. Afterwards every app is Ready, no object carrying
// an instance label is missing from an inventory (no orphans), nothing in
// the final inventories was ever deleted (audit log), and every object
// equals a fresh render.
func TestCrashConsistency(t *testing.T) {
	apps := size(t, "SimpleWebApps", 10, 100)
	planned := size(t, "crashes", 9, 50)
	e := newEnv(t)
	ctx := t.Context()
	ns := testkit.Namespace(t, e.C, testkit.NS{Prefix: "crash-", WaitForServiceAccount: true})
	// The cycle moves every app to another version and back: to rapid's,
	// or, when a promotion has put stable at rapid's version, to another
	// version pinned with spec.version.
	stable, other := testkit.ChannelVersion(t, "stable"), testkit.ChannelVersion(t, "rapid")
	away, awayPatch := "stable → rapid", `{"spec":{"channel":"rapid"}}`
	if other == stable {
		for _, v := range testkit.Versions(t) {
			if v != stable {
				other = v
			}
		}
		if other == stable {
			t.Fatalf("only version %s exists: the cycle would change nothing", stable)
		}
		away, awayPatch = "stable → pinned "+other, fmt.Sprintf(`{"spec":{"version":%q}}`, other)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	// About ten writes per app and phase, the crashes spread over four
	// phases.
	c := &crasher{e: e, planned: planned, maxK: max(3, 40*apps/planned), rng: rand.New(rand.NewPCG(seed, 1)),
		stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	t.Cleanup(func() { close(c.stop); <-c.done })

	phaseTimeout := 4 * time.Minute
	if full() {
		phaseTimeout = 10 * time.Minute
	}
	t0 := time.Now()
	phase := func(what, version string) {
		t.Helper()
		p0 := time.Now()
		testkit.WaitFor(t, phaseTimeout, what+": every SimpleWebApp converged on "+version, func(ctx context.Context) (bool, string) {
			return converged(ctx, e.C, ns, version)
		}, testkit.Every(250*time.Millisecond), testkit.Abort(c.failed), testkit.Diag(func() string {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.running == nil {
				return ""
			}
			return "--- " + c.running.Name() + " log tail ---\n" + c.running.LogTail(30)
		}))
		n, _ := c.counts()
		t.Logf("phase %s converged in %s (%d crashes so far)", what, time.Since(p0).Round(time.Millisecond), n)
	}

	names := e.createApps(ctx, ns, apps, webappv1.SimpleWebAppSpec{Channel: "stable", Message: "m0", Replicas: ptrInt32(1)})
	phase("create (stable)", stable)
	e.patchAll(ctx, ns, names, awayPatch)
	phase(away, other)
	e.patchAll(ctx, ns, names, `{"spec":{"channel":"stable","version":null}}`)
	phase("back to stable", stable)
	e.patchAll(ctx, ns, names, `{"spec":{"message":"m1"}}`)
	phase("message change", stable)
	// More message changes until the planned crashes happened (bounded).
	for i := 2; i < 12; i++ {
		if n, _ := c.counts(); n >= planned {
			break
		}
		e.patchAll(ctx, ns, names, fmt.Sprintf(`{"spec":{"message":"m%d"}}`, i))
		phase(fmt.Sprintf("message change %d", i), stable)
	}
	crashes, lastCrash := c.counts()
	c.finish(t)
	phase("after the last crash, without the failpoint", stable)
	if crashes < planned {
		t.Errorf("%d crashes happened, %d planned", crashes, planned)
	}
	t.Logf("FIGURE crash consistency: %d apps, %d crashes (exit 137 after a random 1..%d-th write), cycle %s → back to stable → message in %s; all Ready %s after the last crash",
		apps, crashes, c.maxK, away, time.Since(t0).Round(time.Second), time.Since(lastCrash).Round(100*time.Millisecond))

	// No orphans.
	orph, total, err := orphans(ctx, e.C, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(orph) > 0 {
		t.Errorf("%d orphans (instance label, in no inventory): %v", len(orph), orph)
	}

	// Every object equals a fresh render; the inventory is exactly it.
	var list webappv1.SimpleWebAppList
	if err := e.C.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	final := map[string]bool{} // resource/name of every final inventory entry
	compared := 0
	for i := range list.Items {
		swa := &list.Items[i]
		desired, err := desiredNow(ctx, swa)
		if err != nil {
			t.Fatal(err)
		}
		if len(desired) != len(swa.Status.Inventory) {
			t.Errorf("%s: inventory %v, render has %d objects", swa.Name, swa.Status.Inventory, len(desired))
		}
		for _, d := range desired {
			gvk := d.GroupVersionKind()
			m, err := e.C.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatal(err)
			}
			final[m.Resource.Resource+"/"+d.GetName()] = true
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(gvk)
			if err := e.C.Get(ctx, client.ObjectKeyFromObject(d), live); err != nil {
				t.Errorf("%s: %s %s of the render: %v", swa.Name, gvk.Kind, d.GetName(), err)
				continue
			}
			compared++
			if got, want := live.GetAnnotations()[apply.AnnotationAppliedHash], d.GetAnnotations()[apply.AnnotationAppliedHash]; got != want {
				t.Errorf("%s: %s %s applied-hash %s, a fresh render's %s", swa.Name, gvk.Kind, d.GetName(), got, want)
			}
			if diff := subset(live.Object, d.Object, ""); diff != "" {
				t.Errorf("%s: %s %s differs from a fresh render: %s", swa.Name, gvk.Kind, d.GetName(), diff)
			}
			if !inInventory(swa, gvk, d.GetName()) {
				t.Errorf("%s: %s %s of the render not in status.inventory %v", swa.Name, gvk.Kind, d.GetName(), swa.Status.Inventory)
			}
		}
	}

	// The audit log: no DELETE ever hit a name of the final inventories.
	events := e.audit()
	deletes := testkit.AuditFilter{Verbs: []string{"delete"}, Namespace: ns}.Filter(events)
	var bad []testkit.AuditEvent
	for _, ev := range deletes {
		if final[ev.ObjectRef.Resource+"/"+ev.ObjectRef.Name] {
			bad = append(bad, ev)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d DELETEs of names in the final inventories:\n%s", len(bad), testkit.FormatAudit(bad, 20))
	}
	writes := testkit.AuditFilter{User: e.id.User(), Verbs: testkit.WriteVerbs, Namespace: ns}.Filter(events)
	t.Logf("FIGURE crash consistency: %d orphans of %d labelled objects; %d objects equal a fresh render; %d DELETEs in total (%d of final names); operator writes in the namespace: %d %v",
		len(orph), total, compared, len(deletes), len(bad), len(writes), testkit.CountBy(writes, testkit.AuditByResource))
}

func inInventory(swa *webappv1.SimpleWebApp, gvk schema.GroupVersionKind, name string) bool {
	for _, r := range swa.Status.Inventory {
		if r.Group == gvk.Group && r.Kind == gvk.Kind && r.Name == name {
			return true
		}
	}
	return false
}

func ptrInt32(n int32) *int32 { return &n }
