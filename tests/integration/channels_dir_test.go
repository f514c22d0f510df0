package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// A changed channel file in the directory is picked up without a restart and
// moves the SimpleWebApps that follow the channel: from the stable version to
// a newer one that exists only in the directory.
func TestChannelDirectoryChangeIsPickedUp(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	stable, next := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 2)
	testkit.CopyPackage(t, channelsDir, stable, next, testkit.MarkVersion(next))
	testkit.WriteChannel(t, channelsDir, "dirmove", stable)
	swa := newWebApp(ns, "dirmove", 2, "moves with its channel")
	swa.Spec.Channel = "dirmove"
	create(t, swa)
	got := rolledOutAndReady(t, ns, "dirmove")
	if got.Status.Version != stable || got.Status.LastHealthyVersion != stable {
		t.Fatalf("status before the channel moved: %+v, want version %s", got.Status, stable)
	}
	before := &appsv1.Deployment{}
	if err := get(t, ns, "dirmove-web", before); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	testkit.WriteChannel(t, channelsDir, "dirmove", stable, next)
	testkit.WaitFor(t, timeout, "status.version "+next+" and its ConfigMap "+testkit.MarkerName, func(context.Context) (bool, string) {
		s, _ := condition(t, ns, "dirmove", webappv1.ConditionReady)
		err := get(t, ns, "dirmove-"+testkit.MarkerName, &corev1.ConfigMap{})
		return s.Status.Version == next && err == nil, fmt.Sprintf("version %q, marker: %v", s.Status.Version, err)
	})
	t.Logf("channel change applied %s after the file was written", time.Since(t0).Round(time.Millisecond))
	s, _ := condition(t, ns, "dirmove", webappv1.ConditionReady)
	if s.Status.Upgrade == nil || s.Status.Upgrade.From != stable || s.Status.Upgrade.To != next {
		t.Errorf("status.upgrade = %+v, want %s → %s", s.Status.Upgrade, stable, next)
	}
	markRolledOut(t, deployment(t, ns, "dirmove", "Deployment of "+next, func(d *appsv1.Deployment) (bool, string) {
		return d.Generation > before.Generation, fmt.Sprintf("generation %d, was %d", d.Generation, before.Generation)
	}))
	got = waitCondition(t, ns, "dirmove", webappv1.ConditionReady, metav1.ConditionTrue, "Available")
	if got.Status.LastHealthyVersion != next || got.Status.Upgrade != nil {
		t.Errorf("after the roll-out: lastHealthyVersion %q (want %s), upgrade %+v", got.Status.LastHealthyVersion, next, got.Status.Upgrade)
	}
}

// A malformed channel file is reported and never applied; fixing it recovers.
func TestMalformedChannelFileIsReported(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	stable := testkit.ChannelVersion(t, "stable")
	testkit.WriteChannel(t, channelsDir, "dirbroken", stable)
	swa := newWebApp(ns, "dirbroken", 1, "keeps running")
	swa.Spec.Channel = "dirbroken"
	create(t, swa)
	rolledOutAndReady(t, ns, "dirbroken")
	before := snapshot(t, ns)

	testkit.WriteChannelFile(t, channelsDir, "dirbroken", "manifests: [oops\n")
	got := waitCondition(t, ns, "dirbroken", webappv1.ConditionStalled, metav1.ConditionTrue, "ChannelInvalid")
	if msg := findCondition(got, webappv1.ConditionStalled).Message; !strings.Contains(msg, "channels directory") {
		t.Errorf("Stalled message does not say where: %q", msg)
	}
	testkit.WaitFor(t, timeout, "Warning event ChannelInvalid", func(context.Context) (bool, string) {
		return hasEvent(t, ns, "dirbroken", "ChannelInvalid"), "no event"
	})
	if after := snapshot(t, ns); after != before {
		t.Errorf("objects changed under a malformed channel:\nbefore %s\nafter  %s", before, after)
	}

	testkit.WriteChannel(t, channelsDir, "dirbroken", stable)
	waitCondition(t, ns, "dirbroken", webappv1.ConditionReady, metav1.ConditionTrue, "Available")
}

// Features are manifest edits: a package version that exists only in the
// channels directory adds an object of a managed kind the stable package does
// not render (a PodDisruptionBudget) and a new mapping from the spec
// (message → its annotation), and the running operator, with nothing but the
// generated role, applies it with no Go change. A kind outside
// internal/render/kinds.go is refused with a reason that says so.
func TestPackageFromDirectoryAddsKindAndMapping(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	version := testkit.NewVersion(t, 5)
	testkit.CopyPackage(t, channelsDir, testkit.ChannelVersion(t, "stable"), version,
		testkit.AddResource("budget.yaml", "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: budget\nspec:\n  maxUnavailable: 1\n  selector:\n    matchLabels: {app.kubernetes.io/name: simplewebapp}\n"),
		func(files map[string]string) error {
			files["spec-mapping.yaml"] += "- source: {kind: SimpleWebApp, fieldPath: spec.message}\n" +
				"  targets:\n  - select: {kind: PodDisruptionBudget, name: budget}\n" +
				"    fieldPaths: [metadata.annotations.motd]\n    options: {create: true}\n"
			return nil
		})
	testkit.WriteChannel(t, channelsDir, "dirfeature", version)
	swa := newWebApp(ns, "feature", 1, "mapped by the package")
	swa.Spec.Channel = "dirfeature"
	create(t, swa)

	pdb := &policyv1.PodDisruptionBudget{}
	testkit.WaitFor(t, timeout, "PodDisruptionBudget feature-budget with the message", func(context.Context) (bool, string) {
		if err := get(t, ns, "feature-budget", pdb); err != nil {
			return false, err.Error()
		}
		return pdb.Annotations["motd"] == "mapped by the package", fmt.Sprint(pdb.Annotations)
	})
	if refs := pdb.OwnerReferences; len(refs) != 1 || refs[0].Name != "feature" || !ptr.Deref(refs[0].Controller, false) {
		t.Errorf("owner references %+v", refs)
	}
	update(t, ns, "feature", func(s *webappv1.SimpleWebApp) { s.Spec.Message = "changed" })
	testkit.WaitFor(t, timeout, "annotation follows the message", func(context.Context) (bool, string) {
		if err := get(t, ns, "feature-budget", pdb); err != nil {
			return false, err.Error()
		}
		return pdb.Annotations["motd"] == "changed", fmt.Sprint(pdb.Annotations)
	})

	// A kind the operator does not manage: not applied, and the reason says why.
	unmanaged := testkit.NewVersion(t, 7)
	testkit.CopyPackage(t, channelsDir, testkit.ChannelVersion(t, "stable"), unmanaged,
		testkit.AddResource("serviceaccount.yaml", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: web\nautomountServiceAccountToken: false\n"))
	update(t, ns, "feature", func(s *webappv1.SimpleWebApp) { s.Spec.Version = unmanaged })
	got := waitCondition(t, ns, "feature", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonPolicyViolation)
	if msg := findCondition(got, webappv1.ConditionStalled).Message; !strings.Contains(msg, "internal/render/kinds.go") {
		t.Errorf("Stalled message %q does not say where managed kinds are declared", msg)
	}
	if err := get(t, ns, "feature-web", &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceAccount of an unmanaged kind: %v", err)
	}
}

// A package that needs a newer operator is refused as a whole.
func TestPackageNeedingNewerOperatorIsRefused(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	version := testkit.NewVersion(t, 6)
	testkit.CopyPackage(t, channelsDir, testkit.ChannelVersion(t, "stable"), version, func(files map[string]string) error {
		files["kustomization.yaml"] += "commonAnnotations:\n  addons.k8s.io/min-operator-version: 99.0.0\n"
		return nil
	})
	swa := newWebApp(ns, "toonew", 1, "never rendered")
	swa.Spec.Version = version
	create(t, swa)
	got := waitCondition(t, ns, "toonew", webappv1.ConditionStalled, metav1.ConditionTrue, "OperatorTooOld")
	if msg := findCondition(got, webappv1.ConditionStalled).Message; !strings.Contains(msg, "99.0.0") {
		t.Errorf("message %q does not name the version needed", msg)
	}
	if err := get(t, ns, "toonew-web", &appsv1.Deployment{}); err == nil {
		t.Error("a Deployment was applied from a refused package")
	}
}
