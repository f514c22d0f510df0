package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// A new version that does not become Ready in time is rolled back to the last
// healthy one by the operator itself, and not retried until the spec changes.
// (No Deployment controller here: the test decides what is rolled out.)
func TestFailedUpgradeRollsBack(t *testing.T) {
	ns := newNamespace(t)
	swa := newWebApp(ns, "rollback", 2, "v1")
	swa.Spec.Version = "1.0.0"
	swa.Spec.UpgradeTimeout = &metav1.Duration{Duration: 5 * time.Second}
	create(t, swa)
	rolledOutAndReady(t, ns, "rollback")

	t0 := time.Now()
	update(t, ns, "rollback", func(s *webappv1.SimpleWebApp) { s.Spec.Version = "1.1.0" })
	eventually(t, timeout, "upgrade to 1.1.0 started", func() (bool, string) {
		s, _ := condition(t, ns, "rollback", webappv1.ConditionReady)
		return s.Status.Upgrade != nil && s.Status.Upgrade.To == "1.1.0" && s.Status.Version == "1.1.0", fmt.Sprintf("%+v", s.Status.Upgrade)
	})
	if !hasEvent(t, ns, "rollback", "Upgrading") {
		t.Error("no Upgrading event")
	}

	got := waitCondition(t, ns, "rollback", webappv1.ConditionStalled, metav1.ConditionTrue, "RolledBack")
	took := time.Since(t0)
	t.Logf("rolled back %s after the upgrade was requested (timeout 5s)", took.Round(time.Millisecond))
	if took < 5*time.Second {
		t.Errorf("rolled back after %s, before the 5s timeout", took)
	}
	if fu := got.Status.FailedUpgrade; got.Status.Version != "1.0.0" || fu == nil || fu.Version != "1.1.0" || fu.Generation != got.Generation {
		t.Fatalf("status after rollback: version %q, failedUpgrade %+v", got.Status.Version, got.Status.FailedUpgrade)
	}
	if ready := findCondition(got, webappv1.ConditionReady); ready.Status != metav1.ConditionFalse || ready.Reason != "RolledBack" {
		t.Errorf("Ready = %+v", ready)
	}
	eventually(t, timeout, "Warning event RolledBack", func() (bool, string) { return hasEvent(t, ns, "rollback", "RolledBack"), "" })
	d := deployment(t, ns, "rollback", "1.0.0 template back", func(d *appsv1.Deployment) (bool, string) {
		return len(d.Spec.Template.Spec.TopologySpreadConstraints) == 0, "still 1.1.0"
	})
	eventually(t, timeout, "1.1.0's PodDisruptionBudget pruned", func() (bool, string) {
		err := get(t, ns, "rollback-web", &policyv1.PodDisruptionBudget{})
		return err != nil, "still there"
	})

	// Not retried in a loop: for two timeouts nothing moves.
	consistently(t, 10*time.Second, "1.1.0 not retried", func() (bool, string) {
		s, _ := condition(t, ns, "rollback", webappv1.ConditionReady)
		now := &appsv1.Deployment{}
		if err := get(t, ns, "rollback-web", now); err != nil {
			return false, err.Error()
		}
		return s.Status.Version == "1.0.0" && s.Status.Upgrade == nil && now.Generation == d.Generation,
			fmt.Sprintf("version %q upgrade %+v deployment generation %d (was %d)", s.Status.Version, s.Status.Upgrade, now.Generation, d.Generation)
	})

	// A spec change is a new attempt.
	update(t, ns, "rollback", func(s *webappv1.SimpleWebApp) { s.Spec.Message = "v2" })
	eventually(t, timeout, "1.1.0 tried again after a spec change", func() (bool, string) {
		s, _ := condition(t, ns, "rollback", webappv1.ConditionReady)
		return s.Status.Upgrade != nil && s.Status.Upgrade.To == "1.1.0", fmt.Sprintf("%+v", s.Status)
	})
}

// consistently fails as soon as cond stops holding during d.
func consistently(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true, func(context.Context) (bool, error) {
		ok, seen := cond()
		if !ok {
			last = seen
			return false, fmt.Errorf("broken")
		}
		return false, nil
	})
	if last != "" {
		t.Fatalf("%s did not hold: %s (%v)", what, last, err)
	}
}
