package controllers

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// DefaultUpgradeTimeout applies when spec.upgradeTimeout is unset (the API
// server defaults it; this covers objects stored before the field existed).
const DefaultUpgradeTimeout = 5 * time.Minute

// heldBack reports whether the desired release is the one that was rolled
// back, for the same spec and the same channel content: then the last healthy
// version stays applied instead of retrying it in a loop.
func heldBack(swa *webappv1.SimpleWebApp, desired Release) bool {
	fu := swa.Status.FailedUpgrade
	return fu != nil && swa.Status.LastHealthyVersion != "" && fu.Version == desired.Version &&
		fu.Generation == swa.Generation && fu.ChannelRevision == desired.ChannelRevision
}

// gateUpgrade follows a version change after it was applied: it records the
// last healthy version, times the roll-out of a new one, and decides to roll
// back when the new version is not Ready by its deadline (or its roll-out
// failed). It fills the upgrade fields of o and returns whether to roll back.
func gateUpgrade(swa *webappv1.SimpleWebApp, o *outcome, now time.Time) (rollback bool) {
	st := swa.Status
	o.lastHealthy = st.LastHealthyVersion
	o.failedUpgrade = st.FailedUpgrade
	if !o.heldBack {
		o.failedUpgrade = nil // the spec or the channel changed since it failed
	}
	done, failed, msg := rollout(o.workload)
	if done {
		o.lastHealthy = o.release.Version
		return false
	}
	if o.heldBack || st.LastHealthyVersion == "" || o.release.Version == st.LastHealthyVersion {
		return false // not an upgrade: a first install or a change within a version
	}
	up := st.Upgrade
	if up == nil || up.To != o.release.Version || up.From != st.LastHealthyVersion {
		// Truncated as the API stores it, so every pass sees the same value.
		up = &webappv1.UpgradeStatus{From: st.LastHealthyVersion, To: o.release.Version, StartedAt: metav1.NewTime(now.Truncate(time.Second))}
	}
	o.upgrade = up
	timeout := upgradeTimeout(swa)
	deadline := upgradeDeadline(swa, up)
	if !failed && now.Before(deadline) {
		o.requeueAfter = deadline.Sub(now) // check the deadline even if nothing else happens
		return false
	}
	o.upgrade = nil
	o.failedUpgrade = &webappv1.FailedUpgrade{
		Version:         o.release.Version,
		Generation:      swa.Generation,
		ChannelRevision: o.release.ChannelRevision,
		Message:         fmt.Sprintf("not Ready within %s: %s", timeout, msg),
		RolledBackAt:    metav1.NewTime(now),
	}
	return true
}

// upgradeDeadline is when an upgrade is given up. startedAt has second
// precision, so the whole second the upgrade started in counts: a roll-back
// comes between timeout and timeout+1s after the start, never before.
func upgradeDeadline(swa *webappv1.SimpleWebApp, up *webappv1.UpgradeStatus) time.Time {
	return up.StartedAt.Add(upgradeTimeout(swa) + time.Second)
}

func upgradeTimeout(swa *webappv1.SimpleWebApp) time.Duration {
	if t := swa.Spec.UpgradeTimeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return DefaultUpgradeTimeout
}
