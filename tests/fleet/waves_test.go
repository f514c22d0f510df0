package fleet

import (
	"fmt"
	"testing"
	"time"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestGoodVersionRollsOutInWaves moves 200 SimpleWebApps in 20 namespaces
// and two shards to a good version: the first wave (3), then 5% (10), then
// the rest, each only after the wave before it is done, at most
// --max-concurrent-upgrades (20) upgrading at once in each shard, and none
// rolled back.
func TestGoodVersionRollsOutInWaves(t *testing.T) {
	ctx := t.Context()
	const channel = "waves"
	stable, next := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 3)
	testkit.CopyPackage(t, env.channels, stable, next, testkit.MarkVersion(next))
	testkit.WriteChannel(t, env.channels, channel, stable)

	f := createFleet(t, "waves", 20, 10, channel, nil)
	f.waitAll(t, 5*time.Minute, "Ready on "+stable, readyOn(stable))

	s := f.sample(ctx, next)
	written := time.Now()
	testkit.WriteChannel(t, env.channels, channel, stable, next)
	f.waitAll(t, 5*time.Minute, "Ready on "+next, readyOn(next))
	t.Logf("200 apps moved to %s in %s", next, time.Since(written).Round(time.Millisecond))
	st := waitRollout(t, time.Minute, next, "complete", func(st *fleet.State) bool { return st.Complete })
	s.end()
	s.checkWaves(t, st)
	if got := waveSizes(st.Waves); len(got) != 2 || got[0] != firstWave || got[1] != 10 {
		t.Errorf("waves %v before the rest, want [%d 10] (5%% of 200)", got, firstWave)
	}
	for shard, n := range s.maxInShard {
		if n > 20 {
			t.Errorf("shard %s had %d upgrades in flight at once, want at most 20 (--max-concurrent-upgrades)", shard, n)
		}
	}
	if st.Halted != nil || len(st.Failures) > 0 {
		t.Errorf("a good version: halted %+v, failures %v", st.Halted, st.Failures)
	}
	apps, err := f.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	namespaces := map[string]bool{}
	for _, m := range st.Waves[0] {
		namespaces[apps[m].Namespace] = true
	}
	if len(namespaces) != firstWave {
		t.Errorf("first wave %v in %d namespaces, want one app in each of %d", st.Waves[0], len(namespaces), firstWave)
	}
	for name, swa := range apps {
		if swa.Status.FailedUpgrade != nil {
			t.Errorf("%s rolled back: %+v", name, swa.Status.FailedUpgrade)
		}
	}
}

// TestTenantCannotHaltTheFleet ships a version that breaks only the apps of
// one tenant (their own spec.patches put a label on their pods that the
// version's pods trip over, tenantStage): their upgrades fail and roll back,
// but their failures are their own (patches, one namespace), so the version
// does not halt and reaches everyone else.
func TestTenantCannotHaltTheFleet(t *testing.T) {
	const channel = "tenant"
	stable, trap := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 4)
	testkit.CopyPackage(t, env.channels, stable, trap, testkit.MarkVersion(trap), testkit.PodLabels(map[string]string{trapLabel: "true"}))
	testkit.WriteChannel(t, env.channels, channel, stable)

	others := createFleet(t, "others", 3, 3, channel, nil)
	tenant := createFleet(t, "tenant", 1, 6, channel, func(_ string, _ int, s *webappv1.SimpleWebAppSpec) {
		s.Patches = []webappv1.Patch{{
			Target: webappv1.PatchTarget{Kind: "Deployment", Name: "web"},
			Patch:  fmt.Sprintf("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {metadata: {labels: {%s: \"true\"}}}}\n", tenantBrokenLabel),
		}}
	})
	others.waitAll(t, 3*time.Minute, "Ready on "+stable, readyOn(stable))
	tenant.waitAll(t, 3*time.Minute, "Ready on "+stable, readyOn(stable))

	testkit.WriteChannel(t, env.channels, channel, stable, trap)
	others.waitAll(t, 3*time.Minute, "Ready on "+trap, readyOn(trap))
	tenant.waitAll(t, 3*time.Minute, "rolled back from "+trap, func(swa *webappv1.SimpleWebApp) (bool, string) {
		fu := swa.Status.FailedUpgrade
		return fu != nil && fu.Version == trap && swa.Status.Version == stable, fmt.Sprintf("version %q failedUpgrade %+v", swa.Status.Version, fu)
	})
	st := waitRollout(t, time.Minute, trap, "complete", func(st *fleet.State) bool { return st.Complete || st.Halted != nil })
	if st.Halted != nil || len(st.Failures) > 0 {
		t.Errorf("one tenant's failures halted the fleet or counted: halted %+v, failures %v", st.Halted, st.Failures)
	}
	for _, m := range append(st.Waves[0], st.Waves[1]...) {
		if tenant.has(m) {
			t.Errorf("%s, with patches of its own, is in an early wave: %v", m, st.Waves)
		}
	}
	t.Logf("%d tenant apps rolled back, %d others on %s; state: wave %d, complete %t, no halt", len(tenant.apps), len(others.apps), trap, st.Wave+1, st.Complete)
}

func (f *fleetOf) has(app string) bool {
	for _, k := range f.apps {
		if k.String() == app {
			return true
		}
	}
	return false
}
