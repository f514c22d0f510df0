package controllers

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

func TestRunningRefused(t *testing.T) {
	patched := func(gen, applied int64) *webappv1.SimpleWebApp {
		swa := &webappv1.SimpleWebApp{Spec: webappv1.SimpleWebAppSpec{Patches: []webappv1.Patch{{Patch: "x"}}}}
		swa.Generation, swa.Status.AppliedGeneration, swa.Status.Version = gen, applied, "1.0.0"
		return swa
	}
	refused := step.Stalled(webappv1.ReasonPatchNotAllowed, "no")
	for _, tc := range []struct {
		name string
		swa  *webappv1.SimpleWebApp
		err  error
		want bool
	}{
		{"the applied generation's patches are refused now", patched(3, 3), refused, true},
		{"so is a floor violation", patched(3, 3), step.Stalled(webappv1.ReasonPolicyViolation, "no"), true},
		{"a new generation is new input", patched(4, 3), refused, false},
		{"never applied", patched(1, 0), refused, false},
		{"no patches: the package is at fault", &webappv1.SimpleWebApp{}, refused, false},
		{"another terminal reason", patched(3, 3), step.Stalled(webappv1.ReasonRenderFailed, "no"), false},
		{"a transient error", patched(3, 3), errors.New("timeout"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, got := runningRefused(tc.swa, tc.err); got != tc.want {
				t.Errorf("runningRefused = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRefusedPatchesMessage(t *testing.T) {
	refusal := &step.Error{Reason: webappv1.ReasonPolicyViolation, Message: "Deployment x-web breaks the rule", Terminal: true}
	removed := (&refusedPatches{refusal: refusal, dropped: []int{0, 2}, action: RefusedPatchesRemove}).message()
	reported := (&refusedPatches{refusal: refusal, action: RefusedPatchesReport}).message()
	for msg, want := range map[string][]string{
		removed:  {refusal.Message, "spec.patches[0,2]", "--refused-patches=remove"},
		reported: {refusal.Message, "still carry", "--refused-patches=report"},
	} {
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%q does not say %q", msg, w)
			}
		}
	}
}

// Removed refused patches stall the app with the refusal's reason while its
// render without them is applied; the stored status keeps the generation
// applied, so the next pass removes them again.
func TestStatusOfRemovedRefusedPatches(t *testing.T) {
	swa := &webappv1.SimpleWebApp{}
	swa.Generation = 2
	o := outcome{applied: true, release: render.Release{Version: "1.0.0"}, workload: deployment(1, 1, 1, 1, 1),
		refused: &refusedPatches{refusal: &step.Error{Reason: webappv1.ReasonPatchNotAllowed, Message: "no", Terminal: true}, dropped: []int{1}}}
	st := computeStatus(swa, o)
	stalled := meta.FindStatusCondition(st.Conditions, webappv1.ConditionStalled)
	if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != webappv1.ReasonPatchNotAllowed || !strings.Contains(stalled.Message, "spec.patches[1]") {
		t.Errorf("Stalled = %+v, want True PatchNotAllowed naming spec.patches[1]", stalled)
	}
	if st.AppliedGeneration != 2 || st.Version != "1.0.0" {
		t.Errorf("applied generation %d version %q, want 2 1.0.0", st.AppliedGeneration, st.Version)
	}
}

func TestSetVersionWithdrawnCondition(t *testing.T) {
	withdrawn := &render.Withdrawal{Package: render.PackageName, Version: "1.1.0", Reason: "too wide"}
	for _, tc := range []struct {
		name   string
		before bool // condition present before
		rel    render.Release
		want   metav1.ConditionStatus // "" : absent
	}{
		{"kept while withdrawn", false, render.Release{Version: "1.1.0", Withdrawn: withdrawn}, metav1.ConditionTrue},
		{"gone once moved", true, render.Release{Version: "1.2.0"}, ""},
		{"left as it was when nothing resolved", true, render.Release{}, metav1.ConditionTrue},
		{"absent when never withdrawn", false, render.Release{Version: "1.2.0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := webappv1.SimpleWebAppStatus{}
			if tc.before {
				setCondition(&st, 1, webappv1.ConditionVersionWithdrawn, metav1.ConditionTrue, webappv1.ReasonVersionWithdrawn, "x")
			}
			setVersionWithdrawnCondition(&st, 1, outcome{release: tc.rel})
			c := meta.FindStatusCondition(st.Conditions, webappv1.ConditionVersionWithdrawn)
			switch {
			case tc.want == "" && c != nil:
				t.Errorf("condition %+v, want none", c)
			case tc.want != "" && (c == nil || c.Status != tc.want || c.Reason != webappv1.ReasonVersionWithdrawn):
				t.Errorf("condition %+v, want %s VersionWithdrawn", c, tc.want)
			}
		})
	}
}
