package controllers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

func deploymentState(ready bool, progressFailed bool) *appsv1.Deployment {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)}}
	d.Generation = 2
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 1, AvailableReplicas: 3}
	if ready {
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3, ReadyReplicas: 3}
	}
	if progressFailed {
		d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	}
	return d
}

func TestGateUpgrade(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-30 * time.Second))
	cases := []struct {
		name         string
		status       webappv1.SimpleWebAppStatus
		applied      string
		heldBack     bool
		ready        bool
		progressFail bool
		rollback     bool
		lastHealthy  string
		upgradeTo    string
		failed       string
		channel      string
		waveTimeout  time.Duration
		halted       string
	}{
		{name: "first install in progress", applied: "1.0.0"},
		{name: "first install ready", applied: "1.0.0", ready: true, lastHealthy: "1.0.0"},
		{name: "change within a version", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0"},
			applied: "1.0.0", lastHealthy: "1.0.0"},
		{name: "upgrade starts", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0"},
			applied: "1.1.0", lastHealthy: "1.0.0", upgradeTo: "1.1.0"},
		{name: "upgrade within its deadline", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			Upgrade: &webappv1.UpgradeStatus{From: "1.0.0", To: "1.1.0", StartedAt: started}},
			applied: "1.1.0", lastHealthy: "1.0.0", upgradeTo: "1.1.0"},
		{name: "upgrade done", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			Upgrade: &webappv1.UpgradeStatus{From: "1.0.0", To: "1.1.0", StartedAt: started}},
			applied: "1.1.0", ready: true, lastHealthy: "1.1.0"},
		{name: "upgrade past its deadline rolls back", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			Upgrade: &webappv1.UpgradeStatus{From: "1.0.0", To: "1.1.0", StartedAt: metav1.NewTime(now.Add(-time.Minute))}},
			applied: "1.1.0", rollback: true, lastHealthy: "1.0.0", failed: "1.1.0"},
		{name: "never before the timeout", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			Upgrade: &webappv1.UpgradeStatus{From: "1.0.0", To: "1.1.0", StartedAt: metav1.NewTime(now.Add(-45 * time.Second))}},
			applied: "1.1.0", lastHealthy: "1.0.0", upgradeTo: "1.1.0"},
		{name: "failed roll-out rolls back at once", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0"},
			applied: "1.1.0", progressFail: true, rollback: true, lastHealthy: "1.0.0", failed: "1.1.0"},
		{name: "held back keeps the failure", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			FailedUpgrade: &webappv1.FailedUpgrade{Version: "1.1.0", Generation: 5}},
			applied: "1.0.0", heldBack: true, ready: true, lastHealthy: "1.0.0", failed: "1.1.0"},
		{name: "failure forgotten once not held back", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			FailedUpgrade: &webappv1.FailedUpgrade{Version: "1.1.0", Generation: 4}},
			applied: "1.1.0", lastHealthy: "1.0.0", upgradeTo: "1.1.0"},
		{name: "a fleet halt of the failed version keeps the failure", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			FailedUpgrade: &webappv1.FailedUpgrade{Version: "1.1.0", Generation: 5}},
			applied: "1.0.0", halted: "1.1.0", ready: true, lastHealthy: "1.0.0", failed: "1.1.0"},
		{name: "a fleet halt of another version forgets the failure", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			FailedUpgrade: &webappv1.FailedUpgrade{Version: "1.1.0", Generation: 4}},
			applied: "1.0.0", halted: "1.2.0", ready: true, lastHealthy: "1.0.0"},
		{name: "the wave timeout caps an upgrade a channel picked", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			Upgrade: &webappv1.UpgradeStatus{From: "1.0.0", To: "1.1.0", StartedAt: started}},
			applied: "1.1.0", channel: "stable", waveTimeout: 20 * time.Second, rollback: true, lastHealthy: "1.0.0", failed: "1.1.0"},
		{name: "the wave timeout leaves a pinned upgrade", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			Upgrade: &webappv1.UpgradeStatus{From: "1.0.0", To: "1.1.0", StartedAt: started}},
			applied: "1.1.0", waveTimeout: 20 * time.Second, lastHealthy: "1.0.0", upgradeTo: "1.1.0"},
		{name: "a shorter spec timeout stays", status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
			Upgrade: &webappv1.UpgradeStatus{From: "1.0.0", To: "1.1.0", StartedAt: started}},
			applied: "1.1.0", channel: "stable", waveTimeout: time.Hour, lastHealthy: "1.0.0", upgradeTo: "1.1.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			swa := &webappv1.SimpleWebApp{Status: tc.status}
			swa.Generation = 5
			swa.Spec.UpgradeTimeout = &metav1.Duration{Duration: 45 * time.Second}
			rel := render.Release{Version: tc.applied, Channel: tc.channel}
			if tc.halted != "" {
				rel.Halted = &render.Withdrawal{Version: tc.halted}
			}
			o := gateUpgrade(swa, rel, tc.heldBack, deploymentState(tc.ready, tc.progressFail), now, tc.waveTimeout)
			if o.rollback != tc.rollback || o.lastHealthy != tc.lastHealthy {
				t.Errorf("rollback=%v lastHealthy=%q, want %v %q", o.rollback, o.lastHealthy, tc.rollback, tc.lastHealthy)
			}
			if got := upgradeTo(o.upgrade); got != tc.upgradeTo {
				t.Errorf("upgrade to %q, want %q", got, tc.upgradeTo)
			}
			if got := failedVersion(o.failedUpgrade); got != tc.failed {
				t.Errorf("failed version %q, want %q", got, tc.failed)
			}
			if tc.upgradeTo != "" && (o.requeueAfter <= 0 || o.requeueAfter > 46*time.Second) {
				t.Errorf("requeueAfter %s, want the time left until the deadline", o.requeueAfter)
			}
			if tc.rollback && o.failedUpgrade.Generation != 5 {
				t.Errorf("failure recorded for generation %d, want 5", o.failedUpgrade.Generation)
			}
		})
	}
}

func TestHeldBackUntilSpecOrChannelChanges(t *testing.T) {
	swa := &webappv1.SimpleWebApp{Status: webappv1.SimpleWebAppStatus{LastHealthyVersion: "1.0.0",
		FailedUpgrade: &webappv1.FailedUpgrade{Version: "1.2.0", Generation: 3, ChannelRevision: "abc"}}}
	swa.Generation = 3
	if !render.HeldBack(swa, render.Release{Version: "1.2.0", ChannelRevision: "abc"}) {
		t.Error("same version, spec and channel: must be held back")
	}
	if render.HeldBack(swa, render.Release{Version: "1.2.0", ChannelRevision: "def"}) {
		t.Error("the channel changed: must be retried")
	}
	if render.HeldBack(swa, render.Release{Version: "1.3.0", ChannelRevision: "abc"}) {
		t.Error("another version: must be tried")
	}
	swa.Generation = 4
	if render.HeldBack(swa, render.Release{Version: "1.2.0", ChannelRevision: "abc"}) {
		t.Error("the spec changed: must be retried")
	}
}

func upgradeTo(u *webappv1.UpgradeStatus) string {
	if u == nil {
		return ""
	}
	return u.To
}

func failedVersion(f *webappv1.FailedUpgrade) string {
	if f == nil {
		return ""
	}
	return f.Version
}
