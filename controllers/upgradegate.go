package controllers

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

// DefaultUpgradeTimeout applies when spec.upgradeTimeout is unset (the API
// server defaults it; this covers objects stored before the field existed).
const DefaultUpgradeTimeout = 5 * time.Minute

// gate is the health gate's decision for one pass: the upgrade bookkeeping
// that goes into status, and whether to roll back.
type gate struct {
	lastHealthy   string
	upgrade       *webappv1.UpgradeStatus
	failedUpgrade *webappv1.FailedUpgrade
	rollback      bool
	// timeout is how long the upgrade may take (upgradeTimeout).
	timeout time.Duration
	// requeueAfter: check the deadline even if nothing else happens.
	requeueAfter time.Duration
}

// gateUpgrade follows a version change after it was applied: it records the
// last healthy version, times the roll-out of a new one, and decides to roll
// back when the new version is not Ready by its deadline (or its roll-out
// failed). applied is the release just applied, heldBack whether it stands in
// for a failed one; waveTimeout caps the time an upgrade picked by a channel
// may take (0: no cap).
func gateUpgrade(swa *webappv1.SimpleWebApp, applied render.Release, heldBack bool, workload *appsv1.Deployment, now time.Time, waveTimeout time.Duration) gate {
	st := swa.Status
	g := gate{lastHealthy: st.LastHealthyVersion, failedUpgrade: st.FailedUpgrade, timeout: upgradeTimeout(swa, applied, waveTimeout)}
	if !heldBack && !haltedAgain(st.FailedUpgrade, applied) {
		g.failedUpgrade = nil // the spec or the channel changed since it failed
	}
	done, failed, msg := rollout(workload)
	if done {
		g.lastHealthy = applied.Version
		return g
	}
	if heldBack || st.LastHealthyVersion == "" || applied.Version == st.LastHealthyVersion {
		return g // not an upgrade: a first install or a change within a version
	}
	up := st.Upgrade
	if up == nil || up.To != applied.Version || up.From != st.LastHealthyVersion {
		// Truncated as the API stores it, so every pass sees the same value.
		up = &webappv1.UpgradeStatus{From: st.LastHealthyVersion, To: applied.Version, StartedAt: metav1.NewTime(now.Truncate(time.Second))}
	}
	deadline := upgradeDeadline(up, g.timeout)
	if !failed && now.Before(deadline) {
		g.upgrade = up
		g.requeueAfter = deadline.Sub(now)
		return g
	}
	g.rollback = true
	g.failedUpgrade = &webappv1.FailedUpgrade{
		Version:         applied.Version,
		Generation:      swa.Generation,
		ChannelRevision: applied.ChannelRevision,
		Message:         fmt.Sprintf("not Ready within %s: %s", g.timeout, msg),
		RolledBackAt:    metav1.NewTime(now),
	}
	return g
}

// upgradeDeadline is when an upgrade is given up. startedAt has second
// precision, so the whole second the upgrade started in counts: a roll-back
// comes between timeout and timeout+1s after the start, never before.
func upgradeDeadline(up *webappv1.UpgradeStatus, timeout time.Duration) time.Time {
	return up.StartedAt.Add(timeout + time.Second)
}

// upgradeTimeout is spec.upgradeTimeout (or the default), capped by the
// fleet's wave timeout when a channel picked the version: a tenant's long
// timeout must not hold a wave, and so the whole fleet, for longer.
func upgradeTimeout(swa *webappv1.SimpleWebApp, applied render.Release, waveTimeout time.Duration) time.Duration {
	t := DefaultUpgradeTimeout
	if u := swa.Spec.UpgradeTimeout; u != nil && u.Duration > 0 {
		t = u.Duration
	}
	if waveTimeout > 0 && applied.Channel != "" && t > waveTimeout {
		return waveTimeout
	}
	return t
}

// haltedAgain: the version that failed is the one a fleet halt holds the
// SimpleWebApp back from. The record stays, so that when the halt is resumed
// this SimpleWebApp does not try the version it already failed again.
func haltedAgain(fu *webappv1.FailedUpgrade, applied render.Release) bool {
	return fu != nil && applied.Halted != nil && fu.Version == applied.Halted.Version
}
