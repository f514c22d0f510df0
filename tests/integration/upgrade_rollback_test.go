package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// A new version that does not become Ready in time is rolled back to the last
// healthy one by the operator itself, and not retried until the spec changes.
// (No Deployment controller here: the test decides what is rolled out.) The
// app is pinned to the stable version, then to a newer one that exists only
// in the channels directory.
func TestFailedUpgradeRollsBack(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	stable, next := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 3)
	testkit.CopyPackage(t, channelsDir, stable, next, testkit.MarkVersion(next))
	swa := newWebApp(ns, "rollback", 2, "v1")
	swa.Spec.Version = stable
	swa.Spec.UpgradeTimeout = &metav1.Duration{Duration: 5 * time.Second}
	create(t, swa)
	rolledOutAndReady(t, ns, "rollback")
	good := &appsv1.Deployment{}
	if err := get(t, ns, "rollback-web", good); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	update(t, ns, "rollback", func(s *webappv1.SimpleWebApp) { s.Spec.Version = next })
	testkit.WaitFor(t, timeout, "upgrade to "+next+" started", func(context.Context) (bool, string) {
		s, _ := condition(t, ns, "rollback", webappv1.ConditionReady)
		return s.Status.Upgrade != nil && s.Status.Upgrade.To == next && s.Status.Version == next, fmt.Sprintf("%+v", s.Status.Upgrade)
	})
	// Events are recorded asynchronously by the broadcaster: poll, don't read once.
	testkit.WaitFor(t, timeout, "Upgrading event", func(context.Context) (bool, string) { return hasEvent(t, ns, "rollback", "Upgrading"), "" })

	got := waitCondition(t, ns, "rollback", webappv1.ConditionStalled, metav1.ConditionTrue, "RolledBack")
	took := time.Since(t0)
	t.Logf("rolled back %s after the upgrade was requested (timeout 5s)", took.Round(time.Millisecond))
	if took < 5*time.Second {
		t.Errorf("rolled back after %s, before the 5s timeout", took)
	}
	if fu := got.Status.FailedUpgrade; got.Status.Version != stable || fu == nil || fu.Version != next || fu.Generation != got.Generation {
		t.Fatalf("status after rollback: version %q (want %s), failedUpgrade %+v (want %s)", got.Status.Version, stable, got.Status.FailedUpgrade, next)
	}
	if ready := findCondition(got, webappv1.ConditionReady); ready.Status != metav1.ConditionFalse || ready.Reason != "RolledBack" {
		t.Errorf("Ready = %+v", ready)
	}
	testkit.WaitFor(t, timeout, "Warning event RolledBack", func(context.Context) (bool, string) { return hasEvent(t, ns, "rollback", "RolledBack"), "" })
	d := deployment(t, ns, "rollback", stable+"'s pod template back", func(d *appsv1.Deployment) (bool, string) {
		return equality.Semantic.DeepEqual(d.Spec.Template, good.Spec.Template), "still " + next + "'s"
	})
	// Objects of the failed version are pruned once the old one is Ready again.
	markRolledOut(t, d)
	testkit.WaitFor(t, timeout, next+"'s ConfigMap "+testkit.MarkerName+" pruned", func(context.Context) (bool, string) {
		err := get(t, ns, "rollback-"+testkit.MarkerName, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// Not retried in a loop: for two timeouts nothing moves.
	testkit.HoldsFor(t, 10*time.Second, next+" not retried", func(context.Context) (bool, string) {
		s, _ := condition(t, ns, "rollback", webappv1.ConditionReady)
		now := &appsv1.Deployment{}
		if err := get(t, ns, "rollback-web", now); err != nil {
			return false, err.Error()
		}
		return s.Status.Version == stable && s.Status.Upgrade == nil && now.Generation == d.Generation,
			fmt.Sprintf("version %q upgrade %+v deployment generation %d (was %d)", s.Status.Version, s.Status.Upgrade, now.Generation, d.Generation)
	}, testkit.Every(100*time.Millisecond))

	// A spec change is a new attempt.
	update(t, ns, "rollback", func(s *webappv1.SimpleWebApp) { s.Spec.Message = "v2" })
	testkit.WaitFor(t, timeout, next+" tried again after a spec change", func(context.Context) (bool, string) {
		s, _ := condition(t, ns, "rollback", webappv1.ConditionReady)
		return s.Status.Upgrade != nil && s.Status.Upgrade.To == next, fmt.Sprintf("%+v", s.Status)
	})
}
