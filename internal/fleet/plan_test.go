package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

var (
	key = Key{Version: "2.0.0", Hash: "0123456789ab"}
	t0  = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
)

// app is a Ready app in namespace ns that wants key.
func app(ns string, i int) App {
	return App{Name: fmt.Sprintf("%s/app-%d", ns, i), Namespace: ns, UID: types.UID(fmt.Sprintf("uid-%s-%d", ns, i)), Wants: true, Ready: true}
}

func fleetOf(namespaces, perNS int) []App {
	var out []App
	for n := range namespaces {
		for i := range perNS {
			out = append(out, app(fmt.Sprintf("ns%d", n), i))
		}
	}
	return out
}

func TestPlan(t *testing.T) {
	p := DefaultPolicy
	cases := []struct {
		name       string
		apps       []App
		sizes      [2]int
		namespaces int // distinct namespaces of the first wave
	}{
		{name: "one app per namespace first", apps: fleetOf(10, 5), sizes: [2]int{3, 3}, namespaces: 3},
		{name: "one namespace fills the first wave", apps: fleetOf(1, 5), sizes: [2]int{3, 1}, namespaces: 1},
		{name: "fewer apps than the first wave", apps: fleetOf(2, 1), sizes: [2]int{2, 0}, namespaces: 2},
		{name: "5% of 200, rounded up", apps: fleetOf(20, 10), sizes: [2]int{3, 10}, namespaces: 3},
		{name: "no app wants it", apps: nil, sizes: [2]int{0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Plan(key, tc.apps, p, t0)
			if len(st.Waves) != 2 || len(st.Waves[0]) != tc.sizes[0] || len(st.Waves[1]) != tc.sizes[1] {
				t.Fatalf("waves %v, want sizes %v", st.Waves, tc.sizes)
			}
			ns := map[string]bool{}
			for _, m := range st.Waves[0] {
				ns[strings.Split(m, "/")[0]] = true
			}
			if len(ns) != tc.namespaces {
				t.Errorf("first wave %v in %d namespaces, want %d", st.Waves[0], len(ns), tc.namespaces)
			}
			if again := Plan(key, tc.apps, p, t0); fmt.Sprint(again.Waves) != fmt.Sprint(st.Waves) {
				t.Errorf("not deterministic: %v then %v", st.Waves, again.Waves)
			}
		})
	}
}

// TestPlanLeavesOutAppsThatSayNothing: apps that are not Ready or have
// patches or an image of their own never go in an early wave.
func TestPlanLeavesOutAppsThatSayNothing(t *testing.T) {
	apps := fleetOf(4, 5)
	for i := range apps {
		switch i % 3 {
		case 0:
			apps[i].Ready = false
		case 1:
			apps[i].Own = true
		}
	}
	st := Plan(key, apps, DefaultPolicy, t0)
	byName := map[string]App{}
	for _, a := range apps {
		byName[a.Name] = a
	}
	for _, w := range st.Waves {
		for _, m := range w {
			if a := byName[m]; !a.Ready || a.Own {
				t.Errorf("%s (ready %t, own %t) is in an early wave", m, a.Ready, a.Own)
			}
		}
	}
}

// TestPlanIsNotByName: the order is the rank of the UID, not names.
func TestPlanIsNotByName(t *testing.T) {
	apps := fleetOf(1, 40)
	firsts := map[string]bool{}
	for v := range 5 {
		st := Plan(Key{Version: fmt.Sprintf("2.%d.0", v), Hash: key.Hash}, apps, DefaultPolicy, t0)
		for _, m := range st.Waves[0] {
			firsts[m] = true
		}
	}
	if len(firsts) <= DefaultPolicy.FirstWave {
		t.Errorf("five versions all start with the same apps %v: the first wave should depend on the version", firsts)
	}
}

func failed(a App, at time.Time, recovered bool) App {
	ts := metav1.NewTime(at)
	a.FailedAt, a.Recovered, a.Wants = &ts, recovered, false
	return a
}

func TestAdvance(t *testing.T) {
	p := DefaultPolicy
	now := t0.Add(time.Minute)
	base := func() *State {
		return &State{Key: key, StartedAt: metav1.NewTime(t0), CountSince: metav1.NewTime(t0),
			Waves: [][]string{{"a/app-0", "b/app-0", "c/app-0"}, {"a/app-1", "b/app-1"}}}
	}
	on := func(a App) App { a.On, a.Wants = true, false; return a }
	upgrading := func(a App) App { a.Upgrading, a.Wants = true, false; return a }
	cases := []struct {
		name     string
		state    func() *State
		apps     []App
		wave     int
		halted   bool
		failures int
		complete bool
		changed  bool
	}{
		{name: "first wave under way", state: base, apps: []App{upgrading(app("a", 0)), upgrading(app("b", 0)), on(app("c", 0)), app("a", 1)}},
		{name: "first wave done: second starts", state: base, apps: []App{on(app("a", 0)), on(app("b", 0)), on(app("c", 0)), app("a", 1)}, wave: 1, changed: true},
		{name: "both waves done: the rest", state: base, apps: []App{on(app("a", 0)), on(app("b", 0)), on(app("c", 0)), on(app("a", 1)), on(app("b", 1)), app("z", 9)}, wave: 2, changed: true},
		{name: "all done: complete", state: base, apps: []App{on(app("a", 0)), on(app("b", 0)), on(app("c", 0)), on(app("a", 1)), on(app("b", 1))}, wave: 2, complete: true, changed: true},
		{name: "two failures in two namespaces halt", state: base,
			apps:   []App{failed(app("a", 0), t0.Add(time.Second), true), failed(app("b", 0), t0.Add(time.Second), true), upgrading(app("c", 0))},
			halted: true, failures: 2, changed: true},
		{name: "two failures in one namespace do not", state: base,
			apps:     []App{failed(app("a", 0), t0.Add(time.Second), true), failed(app("a", 2), t0.Add(time.Second), true), upgrading(app("c", 0))},
			failures: 2, changed: true},
		{name: "failures of apps with their own patches do not count", state: base,
			apps:     []App{func() App { a := failed(app("a", 0), t0.Add(time.Second), true); a.Own = true; return a }(), failed(app("b", 0), t0.Add(time.Second), true), upgrading(app("c", 0))},
			failures: 1, changed: true},
		{name: "failures of apps not running their old version do not count", state: base,
			apps: []App{failed(app("a", 0), t0.Add(time.Second), false), failed(app("b", 0), t0.Add(time.Second), false), upgrading(app("c", 0))}},
		{name: "failures before the roll-out do not count", state: base,
			apps: []App{failed(app("a", 0), t0.Add(-time.Second), true), failed(app("b", 0), t0.Add(-time.Second), true), upgrading(app("c", 0))}},
		{name: "a small share does not halt", state: base,
			apps: append([]App{failed(app("a", 0), t0.Add(time.Second), true), failed(app("b", 0), t0.Add(time.Second), true)},
				on(app("c", 0)), on(app("d", 0)), on(app("e", 0)), upgrading(app("f", 0)), on(app("g", 0))),
			failures: 2, wave: 2, changed: true},
		{name: "a failed member that does not recover holds the wave", state: base,
			apps: []App{failed(app("a", 0), now.Add(-time.Second), false), on(app("b", 0)), on(app("c", 0)), app("a", 1)}},
		{name: "until RecoverWait", state: base,
			apps: []App{failed(app("a", 0), now.Add(-RecoverWait-time.Second), false), on(app("b", 0)), on(app("c", 0)), app("a", 1)}, wave: 1, changed: true},
		{name: "a halted roll-out stays", state: func() *State { s := base(); s.Halted = &Halt{Reason: "x"}; return s },
			apps: []App{on(app("a", 0)), on(app("b", 0)), on(app("c", 0))}, halted: true},
		{name: "after a resume old failures do not count", state: func() *State { s := base(); s.CountSince = metav1.NewTime(t0.Add(30 * time.Second)); return s },
			apps: []App{failed(app("a", 0), t0.Add(time.Second), true), failed(app("b", 0), t0.Add(time.Second), true), on(app("c", 0)), app("a", 1)}, wave: 1, changed: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next, changed := Advance(tc.state(), tc.apps, p, now)
			if next.Wave != tc.wave || (next.Halted != nil) != tc.halted || len(next.Failures) != tc.failures || next.Complete != tc.complete || changed != tc.changed {
				t.Errorf("wave %d halted %v failures %v complete %t changed %t; want wave %d halted %t failures %d complete %t changed %t",
					next.Wave, next.Halted, next.Failures, next.Complete, changed, tc.wave, tc.halted, tc.failures, tc.complete, tc.changed)
			}
		})
	}
}

func TestStateRoundTrip(t *testing.T) {
	st := Plan(Key{Version: "3.0.0+Build.7", Hash: "abcdefabcdef"}, fleetOf(3, 2), DefaultPolicy, t0)
	st.Halted = &Halt{At: metav1.NewTime(t0), Reason: "2 of 3 upgrades to it failed"}
	cm, err := st.ConfigMap("simplewebapp-system")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != "simplewebapp-rollout-3-0-0-build-7-abcdefabcdef" {
		t.Errorf("name %q", cm.Name)
	}
	back, err := FromConfigMap(cm)
	if err != nil {
		t.Fatal(err)
	}
	if back.Key != st.Key || back.Halted == nil || fmt.Sprint(back.Waves) != fmt.Sprint(st.Waves) {
		t.Errorf("read back %+v, wrote %+v", back, st)
	}
	cm.Name = "simplewebapp-rollout-other-abcdefabcdef"
	if _, err := FromConfigMap(cm); err == nil {
		t.Error("a state under another key's name was read")
	}
	back.Resume(metav1.NewTime(t0.Add(time.Hour)))
	if back.Halted != nil || back.Failures != nil || !back.CountSince.Equal(&metav1.Time{Time: t0.Add(time.Hour)}) {
		t.Errorf("after Resume: %+v", back)
	}
}

func TestStoreAdmit(t *testing.T) {
	s := NewStore()
	if why := s.Admit(key, "a/app-0"); !strings.Contains(why, "to be read") {
		t.Errorf("before load: %q", why)
	}
	s.set(map[Key]*State{})
	unplanned := s.Admit(key, "a/app-0")
	if !strings.Contains(unplanned, "waits for its wave") {
		t.Errorf("no state: %q", unplanned)
	}
	if _, wanted := s.work(); len(wanted) != 1 || wanted[0] != key {
		t.Errorf("wanted %v, want %v", wanted, key)
	}
	var woken map[string]bool
	s.OnChange = func(v map[string]bool) { woken = v }
	st := &State{Key: key, Waves: [][]string{{"a/app-0"}, {"b/app-0"}}}
	s.put(st)
	if why := s.Admit(key, "a/app-0"); why != "" {
		t.Errorf("first-wave app: %q", why)
	}
	if why := s.Admit(key, "b/app-0"); why != unplanned {
		t.Errorf("second-wave app: %q, want the message it had before the plan, %q (one status write)", why, unplanned)
	}
	if !woken[key.Version] {
		t.Errorf("the plan woke %v", woken)
	}
	woken = nil
	failed := *st
	failed.Failures = []Failure{{App: "a/app-0"}}
	s.put(&failed)
	if woken != nil {
		t.Errorf("a counted failure woke %v: it admits no other app", woken)
	}
	next := failed
	next.Wave = 1
	s.set(map[Key]*State{key: &next})
	if !woken[key.Version] {
		t.Errorf("the next wave woke %v", woken)
	}
	if why := s.Admit(key, "b/app-0"); why != "" {
		t.Errorf("second-wave app in the second wave: %q", why)
	}
	woken = nil
	halted := *st
	halted.Halted = &Halt{Reason: "2 of 2 upgrades to it failed"}
	s.put(&halted)
	if !woken[key.Version] {
		t.Errorf("a halt woke %v", woken)
	}
	if _, ok := s.Halted(key.Version, key.Hash+"ffff"); !ok {
		t.Error("the halted version is not halted by its full hash")
	}
	if _, ok := s.Halted(key.Version, "ffffffffffff"); ok {
		t.Error("other content of the version is halted too")
	}
	if why := s.Admit(key, "a/app-0"); !strings.Contains(why, "halted") {
		t.Errorf("halted: %q", why)
	}
}

// TestSuspendedAppsHoldNoWave: a suspended member is not worked on, so it
// neither wants the version nor holds its wave.
func TestSuspendedAppsHoldNoWave(t *testing.T) {
	swa := &webappv1.SimpleWebApp{}
	swa.Namespace, swa.Name = "a", "app-0"
	swa.Spec.Suspend = true
	swa.Status.Upgrade = &webappv1.UpgradeStatus{From: "1.0.0", To: key.Version}
	a := AppOf(swa, key, true)
	if a.Wants || a.Upgrading {
		t.Fatalf("suspended app: %+v", a)
	}
	st := &State{Key: key, Waves: [][]string{{"a/app-0"}, {}}}
	if next, _ := Advance(st, []App{a}, DefaultPolicy, t0); next.Wave == 0 {
		t.Errorf("a suspended member holds the first wave")
	}
}

// TestSupersededBy: a roll-out of a newer version supersedes the halts of
// older ones (no longer reported), not of newer ones or itself.
func TestSupersededBy(t *testing.T) {
	s := NewStore()
	halt := &Halt{Reason: "x"}
	older, newer, same := Key{Version: "1.9.0", Hash: "a"}, Key{Version: "2.1.0", Hash: "b"}, Key{Version: "2.0.0", Hash: "c"}
	s.set(map[Key]*State{
		older: {Key: older, Halted: halt},
		newer: {Key: newer, Halted: halt},
		same:  {Key: same, Halted: halt},
	})
	got := s.supersededBy(Key{Version: "2.0.0", Hash: "d"})
	if len(got) != 1 || got[0].Key != older || !got[0].Superseded {
		t.Fatalf("superseded %+v, want only %s", got, older)
	}
	if s.State(older).Superseded {
		t.Error("the stored state changed before it was written")
	}
}
