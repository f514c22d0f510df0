package integration

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// An object that a new package version no longer renders is deleted
// (ApplySet prune), and only that one.
func TestObjectDroppedFromPackageIsPruned(t *testing.T) {
	ns := newNamespace(t)
	swa := newWebApp(ns, "prune", 1, "prune me")
	swa.Spec.Version = "9.0.0" // renders ConfigMap "extra" (test channel)
	create(t, swa)
	eventually(t, timeout, "ConfigMap prune-extra from 9.0.0", func() (bool, string) {
		err := get(t, ns, "prune-extra", &corev1.ConfigMap{})
		return err == nil, fmt.Sprint(err)
	})

	update(t, ns, "prune", func(s *webappv1.SimpleWebApp) { s.Spec.Version = "9.1.0" })
	eventually(t, timeout, "ConfigMap prune-extra pruned by 9.1.0", func() (bool, string) {
		err := get(t, ns, "prune-extra", &corev1.ConfigMap{})
		return err != nil, fmt.Sprint(err)
	})
	if err := get(t, ns, "prune-web", &corev1.Service{}); err != nil {
		t.Errorf("Service of 9.1.0 missing after prune: %v", err)
	}
	got := waitCondition(t, ns, "prune", webappv1.ConditionReconciling, "True", "Progressing")
	if got.Status.Version != "9.1.0" {
		t.Errorf("status.version = %q, want 9.1.0", got.Status.Version)
	}
}

// Following a channel picks its newest version.
func TestChannelPicksNewestVersion(t *testing.T) {
	ns := newNamespace(t)
	swa := newWebApp(ns, "follow", 1, "follow the channel")
	swa.Spec.Channel = "testing"
	create(t, swa)
	got := waitCondition(t, ns, "follow", webappv1.ConditionReconciling, "True", "Progressing")
	if got.Status.Version != "9.1.0" || got.Status.Channel != "testing" {
		t.Errorf("status version/channel = %q/%q, want 9.1.0/testing", got.Status.Version, got.Status.Channel)
	}
}
