package fleet

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestBrokenVersionHaltsTheFleet ships a version whose pods never become
// Ready to 50 SimpleWebApps in 10 namespaces and two shards that follow a
// channel: only the first wave tries it, the version halts for the whole
// fleet once their upgrades fail, every app says so while it stays Ready on
// its version, the halt holds over a leader change and a restart of each
// shard, a resume lets the next wave try it (and the version halts again),
// and a fixed version then rolls out to all 50 in waves.
func TestBrokenVersionHaltsTheFleet(t *testing.T) {
	ctx := t.Context()
	const channel = "fleet"
	stable := testkit.ChannelVersion(t, "stable")
	broken, fixed := testkit.NewVersion(t, 1), testkit.NewVersion(t, 2)
	testkit.CopyPackage(t, env.channels, stable, broken, testkit.MarkVersion(broken), testkit.PodLabels(map[string]string{localcluster.NeverReadyLabel: "true"}))
	testkit.CopyPackage(t, env.channels, stable, fixed, testkit.MarkVersion(fixed))
	testkit.WriteChannel(t, env.channels, channel, stable)

	f := createFleet(t, "halt", 10, 5, channel, nil)
	f.waitAll(t, 3*time.Minute, "Ready on "+stable, readyOn(stable))

	s := f.sample(ctx, broken)
	testkit.WriteChannel(t, env.channels, channel, stable, broken)
	st := waitRollout(t, 2*time.Minute, broken, "halted", func(st *fleet.State) bool { return st.Halted != nil })
	st0 := st
	t.Logf("halted at %s: %s (waves %v)", st.Halted.At.UTC().Format(time.RFC3339), st.Halted.Reason, waveSizes(st.Waves))

	// Only the first wave was ever degraded.
	if len(st.Waves[0]) != firstWave {
		t.Errorf("first wave %v, want %d apps", st.Waves[0], firstWave)
	}
	tried, err := f.upgradingEvents(ctx, broken)
	if err != nil {
		t.Fatal(err)
	}
	for app := range tried {
		if st.WaveOf(app) != 0 {
			t.Errorf("%s (wave %d) started an upgrade to %s: only the first wave may", app, st.WaveOf(app)+1, broken)
		}
	}
	if len(tried) != firstWave {
		t.Errorf("%d apps started an upgrade to %s (%v), want the %d of the first wave", len(tried), broken, tried, firstWave)
	}
	// Halted within one upgrade timeout of the first failure.
	var first time.Time
	for _, fl := range st.Failures {
		if first.IsZero() || fl.RolledBackAt.Time.Before(first) {
			first = fl.RolledBackAt.Time
		}
	}
	if first.IsZero() || st.Halted.At.Sub(first) > upgradeTimeout {
		t.Errorf("halted at %s, first failure at %s: want within %s", st.Halted.At, first, upgradeTimeout)
	}
	t.Logf("first counted failure rolled back at %s; halted %s later", first.UTC().Format(time.RFC3339), st.Halted.At.Sub(first))

	held := f.checkHeld(t, st, stable, broken)
	f.checkEvents(t, webappv1.ReasonVersionHalted, broken)
	f.checkHaltedMetric(t, broken, st.Key.Hash, "1")
	t.Logf("every app: Ready on %s, UpgradeHeld: %s", stable, held)

	// A leader change in shard a and a restart of shard b: the halt is in
	// the cluster, not in memory.
	la := env.leader("a")
	if la == "" {
		t.Fatal("shard a has no leader")
	}
	env.stopped[la], env.stopped["b1"] = true, true
	env.ops[la].Kill()
	env.ops["b1"].Kill()
	if err := env.start(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"a1": "a2", "a2": "a1"}[la]
	testkit.WaitFor(t, 2*time.Minute, other+" takes shard a's Lease over from "+la, func(context.Context) (bool, string) {
		return env.leader("a") == other, "leader " + env.leader("a")
	}, env.waitOpts(nil))
	if err := env.start(ctx, la); err != nil { // back, as the standby
		t.Fatal(err)
	}
	f.requestReconcile(t, "after-restart")
	f.checkHeld(t, st, stable, broken)
	if again, err := f.upgradingEvents(ctx, broken); err != nil || len(again) != firstWave {
		t.Errorf("after the restarts %d apps have upgraded to %s (err %v), want still the %d of the first wave", len(again), broken, err, firstWave)
	}
	f.checkHaltedMetric(t, broken, st.Key.Hash, "1")

	// Resume: the next wave tries the version, and it halts again on
	// failures counted after the resume only.
	resumedAt := resume(t, st.Key)
	st = waitRollout(t, 2*time.Minute, broken, "halted again after the resume", func(st *fleet.State) bool {
		return st.Halted != nil && !st.Halted.At.Before(&resumedAt)
	})
	for _, fl := range st.Failures {
		if fl.RolledBackAt.Before(&resumedAt) {
			t.Errorf("failure of %s at %s counted after the resume at %s", fl.App, fl.RolledBackAt, resumedAt)
		}
		if st.WaveOf(fl.App) == 0 {
			t.Errorf("failure of %s, of the first wave, counted again after the resume", fl.App)
		}
	}
	t.Logf("after the resume: halted again at wave %d: %s", st.Wave+1, st.Halted.Reason)
	s.end()

	// A fixed version rolls out to everyone, in waves.
	s = f.sample(ctx, fixed)
	testkit.WriteChannel(t, env.channels, channel, stable, broken, fixed)
	f.waitAll(t, 3*time.Minute, "Ready on "+fixed, readyOn(fixed))
	st = waitRollout(t, time.Minute, fixed, "complete", func(st *fleet.State) bool { return st.Complete })
	s.end()
	s.checkWaves(t, st)
	if len(st.Waves[0]) != firstWave || len(st.Waves[1]) != 3 {
		t.Errorf("waves of %s: %v, want %d and 3 (5%% of 50) before the rest", fixed, waveSizes(st.Waves), firstWave)
	}
	// The fixed version's roll-out superseded the halt: no longer reported.
	if old, err := rollout(ctx, broken); err != nil || old == nil || old.Halted == nil || !old.Superseded {
		t.Errorf("the halt of %s after %s rolled out: %+v (err %v), want halted and superseded", broken, fixed, old, err)
	}
	f.checkHaltedMetric(t, broken, st0.Key.Hash, "")
	f.waitAll(t, 30*time.Second, "no UpgradeHeld", func(swa *webappv1.SimpleWebApp) (bool, string) {
		c := apimeta.FindStatusCondition(swa.Status.Conditions, webappv1.ConditionUpgradeHeld)
		return c == nil, fmt.Sprintf("%v", c)
	})
}

// checkHeld waits until every app is Ready on running, UpgradeHeld by the
// halt of broken, and returns one condition message.
func (f *fleetOf) checkHeld(t *testing.T, st *fleet.State, running, broken string) string {
	t.Helper()
	var msg string
	want := strconv.Itoa(len(st.Failures)) + " of "
	f.waitAll(t, time.Minute, "Ready on "+running+" and UpgradeHeld (VersionHalted)", func(swa *webappv1.SimpleWebApp) (bool, string) {
		if ok, why := readyOn(running)(swa); !ok {
			return false, why
		}
		c := apimeta.FindStatusCondition(swa.Status.Conditions, webappv1.ConditionUpgradeHeld)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != webappv1.ReasonVersionHalted ||
			!strings.Contains(c.Message, broken) || !strings.Contains(c.Message, want) {
			return false, fmt.Sprintf("UpgradeHeld %v, want True/%s naming %s and %q", c, webappv1.ReasonVersionHalted, broken, want)
		}
		msg = c.Message
		return true, ""
	})
	return msg
}

// checkHaltedMetric waits until the leaders serve simplewebapp_version_halted
// for the version with value want ("": no such series).
func (f *fleetOf) checkHaltedMetric(t *testing.T, version, content, want string) {
	t.Helper()
	series := fmt.Sprintf(`simplewebapp_version_halted{content=%q,version=%q} `, content, version)
	testkit.WaitFor(t, 30*time.Second, series+want+" on the leaders of both shards", func(ctx context.Context) (bool, string) {
		var seen []string
		ok := true
		for _, shard := range []string{"a", "b"} {
			l := env.leader(shard)
			if l == "" {
				return false, "no leader of shard " + shard
			}
			v, err := metric(ctx, l, series)
			if err != nil {
				return false, err.Error()
			}
			seen = append(seen, l+": "+v)
			ok = ok && v == want
		}
		return ok, strings.Join(seen, ", ")
	}, env.waitOpts(nil))
}

// resume lifts the halt of k as `kubectl swa resume-version` does, and
// returns when.
func resume(t *testing.T, k fleet.Key) metav1.Time {
	t.Helper()
	ctx := t.Context()
	var cm corev1.ConfigMap
	if err := env.C.Get(ctx, client.ObjectKey{Namespace: operatortest.Namespace, Name: k.ConfigMapName()}, &cm); err != nil {
		t.Fatal(err)
	}
	st, err := fleet.FromConfigMap(&cm)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st.Resume(now)
	next, err := st.ConfigMap(operatortest.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = next.Data
	if err := env.C.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	return now
}

// checkEvents waits until every app has an event with reason naming
// version; the operator drops events when its queue is full (and logs each),
// so an app without one passes only with such a log line.
func (f *fleetOf) checkEvents(t *testing.T, reason, version string) {
	t.Helper()
	var missing []string
	_, _, err := testkit.Poll(t.Context(), 500*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := f.events(ctx, reason, version)
		if err != nil {
			return false, err.Error(), nil
		}
		missing = missing[:0]
		for _, k := range f.apps {
			if got[k.String()] == 0 {
				missing = append(missing, k.String())
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d apps without one", len(missing)), nil
	})
	if err == nil {
		return
	}
	for _, app := range missing {
		ns, name, _ := strings.Cut(app, "/")
		dropped := false
		for _, op := range env.ops {
			for _, l := range strings.Split(op.LogLinesWith("event queue full", 1000), "\n") {
				if strings.Contains(l, `"object":"`+ns+"/"+name+`"`) && strings.Contains(l, `"reason":"`+reason+`"`) {
					dropped = true
				}
			}
		}
		if !dropped {
			t.Errorf("%s has no %s event naming %s, and no operator logged dropping one", app, reason, version)
		}
	}
	t.Logf("%d apps without a %s event: the operator's event queue was full", len(missing), reason)
}
