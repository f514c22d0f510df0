package controllers

import (
	"testing"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

func TestUpgradeSteps(t *testing.T) {
	up := func(from, to string) *webappv1.UpgradeStatus { return &webappv1.UpgradeStatus{From: from, To: to} }
	for _, c := range []struct {
		name               string
		before, after      webappv1.SimpleWebAppStatus
		started, succeeded bool
	}{
		{name: "first install",
			before: webappv1.SimpleWebAppStatus{},
			after:  webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0"}},
		{name: "an upgrade seen in flight",
			before:  webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0"},
			after:   webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", Upgrade: up("1.0.0", "1.1.0")},
			started: true},
		{name: "still in flight",
			before: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", Upgrade: up("1.0.0", "1.1.0")},
			after:  webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", Upgrade: up("1.0.0", "1.1.0")}},
		{name: "an upgrade seen in flight succeeds",
			before:    webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", Upgrade: up("1.0.0", "1.1.0")},
			after:     webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.1.0"},
			succeeded: true},
		{name: "an upgrade done before any status write saw it in flight",
			before:  webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0"},
			after:   webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.1.0"},
			started: true, succeeded: true},
		{name: "the target changes in flight",
			before:  webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", Upgrade: up("1.0.0", "1.1.0")},
			after:   webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", Upgrade: up("1.0.0", "1.2.0")},
			started: true},
		{name: "the spec goes back to the running version in flight: no success",
			before: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", Upgrade: up("1.0.0", "1.1.0")},
			after:  webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0"}},
		{name: "a roll-back keeps the last healthy version",
			before: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", Upgrade: up("1.0.0", "1.1.0")},
			after:  webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0", FailedUpgrade: &webappv1.FailedUpgrade{Version: "1.1.0"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			started, succeeded := upgradeSteps(&c.before, &c.after)
			if started != c.started || succeeded != c.succeeded {
				t.Errorf("started %t, succeeded %t; want %t, %t", started, succeeded, c.started, c.succeeded)
			}
		})
	}
}
