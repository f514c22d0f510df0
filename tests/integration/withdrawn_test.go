package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

// A version withdrawn in the channels directory is never moved to, while
// the apps that run it keep running it and say so until moved: a channel
// resolves to its newest version that is not withdrawn, pinning it anew is
// refused, and nothing of the refused app is created.
func TestWithdrawnVersion(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	stable, bad := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 8)
	testkit.CopyPackage(t, channelsDir, stable, bad, testkit.MarkVersion(bad))
	testkit.WriteChannel(t, channelsDir, "dirwithdraw", stable, bad)
	follower := newWebApp(ns, "follows", 1, "follows the channel")
	follower.Spec.Channel = "dirwithdraw"
	pinned := newWebApp(ns, "pinned", 1, "pinned")
	pinned.Spec.Version = bad
	create(t, follower)
	create(t, pinned)
	for _, name := range []string{"follows", "pinned"} {
		if got := rolledOutAndReady(t, ns, name); got.Status.Version != bad {
			t.Fatalf("%s runs %s, want %s", name, got.Status.Version, bad)
		}
	}

	// Only this test's version is withdrawn: other tests share the directory.
	testkit.WriteChannelFile(t, channelsDir, render.WithdrawnFile,
		fmt.Sprintf("withdrawn:\n- {name: %s, version: %s, reason: its patch policy is too wide}\n", render.PackageName, bad))
	t.Cleanup(func() { testkit.WriteChannelFile(t, channelsDir, render.WithdrawnFile, "withdrawn: []\n") })
	for _, name := range []string{"follows", "pinned"} {
		got := waitCondition(t, ns, name, webappv1.ConditionVersionWithdrawn, metav1.ConditionTrue, webappv1.ReasonVersionWithdrawn)
		if got.Status.Version != bad || !strings.Contains(findCondition(got, webappv1.ConditionVersionWithdrawn).Message, "too wide") {
			t.Errorf("%s: version %s, condition %+v; want %s kept, saying why", name, got.Status.Version, findCondition(got, webappv1.ConditionVersionWithdrawn), bad)
		}
		if c := findCondition(got, webappv1.ConditionReady); c.Status != metav1.ConditionTrue {
			t.Errorf("%s: Ready %+v, want True: it keeps running", name, c)
		}
		testkit.WaitFor(t, timeout, "Warning event VersionWithdrawn on "+name, func(context.Context) (bool, string) {
			return hasEvent(t, ns, name, webappv1.ReasonVersionWithdrawn), "no event"
		})
	}

	newcomer := newWebApp(ns, "newcomer", 1, "new on the channel")
	newcomer.Spec.Channel = "dirwithdraw"
	latecomer := newWebApp(ns, "latecomer", 1, "pins the withdrawn version")
	latecomer.Spec.Version = bad
	create(t, newcomer)
	create(t, latecomer)
	if got := rolledOutAndReady(t, ns, "newcomer"); got.Status.Version != stable {
		t.Errorf("a new app on the channel runs %s, want %s (the newest not withdrawn)", got.Status.Version, stable)
	}
	got := waitCondition(t, ns, "latecomer", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonVersionWithdrawn)
	if msg := findCondition(got, webappv1.ConditionStalled).Message; !strings.Contains(msg, bad) || !strings.Contains(msg, "too wide") {
		t.Errorf("Stalled message %q does not name the version and why", msg)
	}
	if err := get(t, ns, "latecomer-web", &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused app's Deployment: %v, want NotFound", err)
	}

	// Moving off it clears the condition.
	update(t, ns, "pinned", func(s *webappv1.SimpleWebApp) { s.Spec.Version = stable })
	testkit.WaitFor(t, timeout, "pinned moved off the withdrawn version", func(context.Context) (bool, string) {
		s, c := condition(t, ns, "pinned", webappv1.ConditionVersionWithdrawn)
		return s.Status.Version == stable && c == nil, fmt.Sprintf("version %s, condition %+v", s.Status.Version, c)
	})
}

// When the rules refuse a patch that the running objects carry (here the
// package narrows its patch policy; an operator upgrade with stricter rules
// is the same), the render without that patch is applied, so what is
// refused does not keep running, and the app says so. The other patches
// stay.
func TestRefusedPatchesAreRemovedFromRunningObjects(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	stable, version := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 9)
	testkit.CopyPackage(t, channelsDir, stable, version)
	swa := newWebApp(ns, "narrowed", 1, "has patches")
	swa.Spec.Version = version
	swa.Spec.Patches = []webappv1.Patch{
		{Target: webappv1.PatchTarget{Kind: "Deployment", Name: "web"}, Patch: "spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        env:\n        - {name: REFUSED_LATER, value: x}\n"},
		{Target: webappv1.PatchTarget{Kind: "Deployment", Name: "web"}, Patch: "spec:\n  minReadySeconds: 7\n"},
	}
	create(t, swa)
	rolledOutAndReady(t, ns, "narrowed")
	d := deployment(t, ns, "narrowed", "Deployment with both patches", func(d *appsv1.Deployment) (bool, string) {
		return hasEnv(d, "REFUSED_LATER") && d.Spec.MinReadySeconds == 7, fmt.Sprintf("env %v, minReadySeconds %d", d.Spec.Template.Spec.Containers[0].Env, d.Spec.MinReadySeconds)
	})

	testkit.CopyPackage(t, channelsDir, stable, version, func(files map[string]string) error {
		const env = "  - spec.template.spec.containers[*].env\n"
		if !strings.Contains(files["patch-policy.yaml"], env) {
			return errors.New("the package's patch policy does not allow env: the test needs another refused path")
		}
		files["patch-policy.yaml"] = strings.Replace(files["patch-policy.yaml"], env, "", 1)
		return nil
	})
	got := waitCondition(t, ns, "narrowed", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonPatchNotAllowed)
	if msg := findCondition(got, webappv1.ConditionStalled).Message; !strings.Contains(msg, "spec.patches[0] are left out") {
		t.Errorf("Stalled message %q does not say spec.patches[0] was left out", msg)
	}
	deployment(t, ns, "narrowed", "Deployment without the refused patch, with the other", func(after *appsv1.Deployment) (bool, string) {
		return !hasEnv(after, "REFUSED_LATER") && after.Spec.MinReadySeconds == 7 && after.Generation > d.Generation,
			fmt.Sprintf("env %v, minReadySeconds %d", after.Spec.Template.Spec.Containers[0].Env, after.Spec.MinReadySeconds)
	})
	testkit.WaitFor(t, timeout, "Warning event RefusedPatchesRemoved", func(context.Context) (bool, string) {
		return hasEvent(t, ns, "narrowed", "RefusedPatchesRemoved"), "no event"
	})

	// A new generation with a refused patch is new input: nothing of it is
	// applied, and the objects as they run now stay.
	before := snapshot(t, ns)
	update(t, ns, "narrowed", func(s *webappv1.SimpleWebApp) { s.Spec.Message = "edited"; s.Spec.Patches = s.Spec.Patches[:1] })
	got = waitCondition(t, ns, "narrowed", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonPatchNotAllowed)
	if msg := findCondition(got, webappv1.ConditionStalled).Message; strings.Contains(msg, "left out") {
		t.Errorf("a new generation's refusal applied something: %q", msg)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("objects changed for a refused generation:\n%s\n%s", before, after)
	}
}

func hasEnv(d *appsv1.Deployment, name string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return true
			}
		}
	}
	return false
}
