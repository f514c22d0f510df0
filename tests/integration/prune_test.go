package integration

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/tests/kit"
)

// An object that a new package version no longer renders is deleted
// (ApplySet prune), and only that one.
func TestObjectDroppedFromPackageIsPruned(t *testing.T) {
	ns := kit.Namespace(t, k8s, testNS)
	swa := newWebApp(ns, "prune", 1, "prune me")
	swa.Spec.Version = pruneWith // renders ConfigMap "extra" (test channel)
	create(t, swa)
	kit.WaitFor(t, timeout, "ConfigMap prune-extra from "+pruneWith, func(context.Context) (bool, string) {
		err := get(t, ns, "prune-extra", &corev1.ConfigMap{})
		return err == nil, fmt.Sprint(err)
	})

	update(t, ns, "prune", func(s *webappv1.SimpleWebApp) { s.Spec.Version = pruneWithout })
	kit.WaitFor(t, timeout, "ConfigMap prune-extra pruned by "+pruneWithout, func(context.Context) (bool, string) {
		err := get(t, ns, "prune-extra", &corev1.ConfigMap{})
		return err != nil, fmt.Sprint(err)
	})
	if err := get(t, ns, "prune-web", &corev1.Service{}); err != nil {
		t.Errorf("Service of %s missing after prune: %v", pruneWithout, err)
	}
	got := waitCondition(t, ns, "prune", webappv1.ConditionReconciling, "True", "Progressing")
	if got.Status.Version != pruneWithout {
		t.Errorf("status.version = %q, want %s", got.Status.Version, pruneWithout)
	}
}

// Following a channel picks its newest version: "testing" lists pruneWith
// and pruneWithout.
func TestChannelPicksNewestVersion(t *testing.T) {
	ns := kit.Namespace(t, k8s, testNS)
	swa := newWebApp(ns, "follow", 1, "follow the channel")
	swa.Spec.Channel = "testing"
	create(t, swa)
	got := waitCondition(t, ns, "follow", webappv1.ConditionReconciling, "True", "Progressing")
	if got.Status.Version != pruneWithout || got.Status.Channel != "testing" {
		t.Errorf("status version/channel = %q/%q, want %s/testing", got.Status.Version, got.Status.Channel, pruneWithout)
	}
}
