package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// An object that a new package version no longer renders is deleted
// (ApplySet prune), and only that one.
func TestObjectDroppedFromPackageIsPruned(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	swa := newWebApp(ns, "prune", 1, "prune me")
	swa.Spec.Version = pruneWith // renders ConfigMap "extra" (test channel)
	create(t, swa)
	testkit.WaitFor(t, timeout, "ConfigMap prune-extra from "+pruneWith, func(context.Context) (bool, string) {
		err := get(t, ns, "prune-extra", &corev1.ConfigMap{})
		return err == nil, fmt.Sprint(err)
	})

	update(t, ns, "prune", func(s *webappv1.SimpleWebApp) { s.Spec.Version = pruneWithout })
	// Pruned once the new version is rolled out (no Deployment controller here).
	testkit.WaitFor(t, timeout, pruneWithout+" applied", func(context.Context) (bool, string) {
		got := &webappv1.SimpleWebApp{}
		if err := get(t, ns, "prune", got); err != nil {
			return false, err.Error()
		}
		return got.Status.Version == pruneWithout, got.Status.Version
	})
	testkit.HoldsFor(t, time.Second, "ConfigMap prune-extra kept until "+pruneWithout+" is Ready", func(context.Context) (bool, string) {
		err := get(t, ns, "prune-extra", &corev1.ConfigMap{})
		return err == nil, fmt.Sprint(err)
	})
	rolledOutAndReady(t, ns, "prune")
	testkit.WaitFor(t, timeout, "ConfigMap prune-extra pruned by "+pruneWithout, func(context.Context) (bool, string) {
		err := get(t, ns, "prune-extra", &corev1.ConfigMap{})
		return err != nil, fmt.Sprint(err)
	})
	if err := get(t, ns, "prune-web", &corev1.Service{}); err != nil {
		t.Errorf("Service of %s missing after prune: %v", pruneWithout, err)
	}
	got := &webappv1.SimpleWebApp{}
	testkit.WaitFor(t, timeout, "prune-extra gone from status.inventory", func(context.Context) (bool, string) {
		if err := get(t, ns, "prune", got); err != nil {
			return false, err.Error()
		}
		for _, ref := range got.Status.Inventory {
			if ref.Name == "prune-extra" {
				return false, fmt.Sprint(got.Status.Inventory)
			}
		}
		return true, ""
	})
}

// Following a channel picks its newest version: "testing" lists pruneWith
// and pruneWithout.
func TestChannelPicksNewestVersion(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	swa := newWebApp(ns, "follow", 1, "follow the channel")
	swa.Spec.Channel = "testing"
	create(t, swa)
	got := waitCondition(t, ns, "follow", webappv1.ConditionReconciling, "True", "Progressing")
	if got.Status.Version != pruneWithout || got.Status.Channel != "testing" {
		t.Errorf("status version/channel = %q/%q, want %s/testing", got.Status.Version, got.Status.Channel, pruneWithout)
	}
}
