package controllers

import (
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
