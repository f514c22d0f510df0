package controllers

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/render"
)

func TestUpgradeSlots(t *testing.T) {
	s := &upgradeSlots{max: 2}
	a, b, c := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}, types.NamespacedName{Name: "c"}
	if !s.acquire(a, false) || !s.acquire(b, false) || s.acquire(c, false) {
		t.Fatal("the third upgrade got a slot")
	}
	if !s.acquire(a, false) {
		t.Error("a holder lost its slot")
	}
	if !s.acquire(c, true) || s.inFlight() != 3 {
		t.Error("an upgrade under way (after a restart) must get its slot back")
	}
	s.release(a)
	s.release(c)
	if !s.acquire(types.NamespacedName{Name: "d"}, false) {
		t.Error("no slot after releases")
	}
	if !(&upgradeSlots{}).acquire(a, false) {
		t.Error("0 means unbounded")
	}
}

// A freed slot wakes the SimpleWebApp that has waited longest, once; one
// that got a slot or went away meanwhile is passed over.
func TestUpgradeSlotsWakeTheLongestWaiting(t *testing.T) {
	var woken []string
	s := &upgradeSlots{max: 1, wake: func(k types.NamespacedName) { woken = append(woken, k.Name) }}
	n := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
	s.acquire(n("holder"), false)
	for _, name := range []string{"b", "c", "b", "d", "e"} { // b asks twice: queued once
		if s.acquire(n(name), false) {
			t.Fatalf("%s got a slot while it was taken", name)
		}
	}
	s.release(n("c")) // gone without a slot: wakes no one
	if len(woken) != 0 {
		t.Fatalf("a release without a slot woke %v", woken)
	}
	s.release(n("holder"))
	if !s.acquire(n("b"), false) { // the woken one takes the slot
		t.Fatal("b got no slot")
	}
	s.release(n("b")) // c went away: d is next
	if s.acquire(n("x"), false) != true {
		t.Fatal("x got no free slot") // x took it before d looked
	}
	if s.acquire(n("d"), false) {
		t.Fatal("d got a taken slot")
	}
	s.release(n("x")) // d lost its turn and queued again, after e
	want := []string{"b", "d", "e"}
	if strings.Join(woken, ",") != strings.Join(want, ",") {
		t.Errorf("woken %v, want %v", woken, want)
	}
	if !s.acquire(n("e"), false) {
		t.Fatal("e got no slot")
	}
	s.release(n("e"))
	s.release(n("nobody")) // nothing held, nothing woken
	if want = append(want, "d"); strings.Join(woken, ",") != strings.Join(want, ",") {
		t.Errorf("woken %v, want %v", woken, want)
	}
}

// A woken SimpleWebApp that no longer wants the slot (its spec changed, it
// went away) passes the wake-up on, so the slot does not stand empty.
func TestUpgradeSlotsPassAWakeUpOn(t *testing.T) {
	var woken []string
	s := &upgradeSlots{max: 1, wake: func(k types.NamespacedName) { woken = append(woken, k.Name) }}
	n := func(name string) types.NamespacedName { return types.NamespacedName{Name: name} }
	s.acquire(n("holder"), false)
	s.acquire(n("a"), false)
	s.acquire(n("b"), false)
	s.release(n("holder")) // wakes a
	s.release(n("a"))      // a was pinned meanwhile: b's turn
	s.release(n("a"))      // and only once
	if got := strings.Join(woken, ","); got != "a,b" {
		t.Errorf("woken %s, want a,b", got)
	}
	if !s.acquire(n("b"), false) {
		t.Error("b got no slot")
	}
}

// The queue stays in proportion to the SimpleWebApps that wait, however
// often one that was not woken takes a freed slot and queues again later.
func TestUpgradeSlotsQueueIsBounded(t *testing.T) {
	var woken types.NamespacedName
	s := &upgradeSlots{max: 1, wake: func(k types.NamespacedName) { woken = k }}
	apps := make([]types.NamespacedName, 10)
	for i := range apps {
		apps[i] = types.NamespacedName{Name: fmt.Sprint("app-", i)}
	}
	holder := types.NamespacedName{Name: "holder"}
	s.acquire(holder, false)
	for round := range 1000 {
		for _, k := range apps {
			s.acquire(k, false) // refused: queued unless it is
		}
		s.release(holder)
		next := apps[round%len(apps)]
		if next == woken {
			next = apps[(round+1)%len(apps)]
		}
		if !s.acquire(next, false) { // not the woken one: its entry stays behind
			t.Fatalf("round %d: %s got no free slot", round, next.Name)
		}
		holder = next
	}
	if len(s.waiting) > 2*len(apps)+16 {
		t.Errorf("%d keys queued for %d SimpleWebApps", len(s.waiting), len(apps))
	}
}

func TestIsUpgrade(t *testing.T) {
	st := func(version, healthy string) *webappv1.SimpleWebApp {
		return &webappv1.SimpleWebApp{Status: webappv1.SimpleWebAppStatus{Version: version, LastHealthyVersion: healthy}}
	}
	for _, tc := range []struct {
		name string
		swa  *webappv1.SimpleWebApp
		to   string
		want bool
	}{
		{"first install", st("", ""), "1.0.0", false},
		{"same version", st("1.0.0", "1.0.0"), "1.0.0", false},
		{"a new version", st("1.0.0", "1.0.0"), "1.1.0", true},
		{"back to the healthy one", st("1.1.0", "1.0.0"), "1.0.0", false},
		{"never healthy yet", st("1.0.0", ""), "1.1.0", false},
	} {
		if got := fleet.IsUpgrade(tc.swa, render.Release{Version: tc.to}); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}
