package controllers

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

func deployment(gen, observed int64, replicas, updated, available int32) *appsv1.Deployment {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}}
	d.Name, d.Generation = "x-web", gen
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{render.LabelInstance: "x"}}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: updated, UpdatedReplicas: updated,
		AvailableReplicas: available, ReadyReplicas: available}
	return d
}

func TestRollout(t *testing.T) {
	failed := deployment(2, 2, 3, 1, 1)
	failed.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	oldPods := deployment(2, 2, 3, 3, 3)
	oldPods.Status.Replicas = 4
	for _, tc := range []struct {
		name         string
		d            *appsv1.Deployment
		done, failed bool
	}{
		{"no Deployment", nil, false, false},
		{"generation not observed", deployment(2, 1, 3, 3, 3), false, false},
		{"pods not updated", deployment(2, 2, 3, 1, 3), false, false},
		{"old pods left", oldPods, false, false},
		{"pods not available", deployment(2, 2, 3, 3, 2), false, false},
		{"rolled out", deployment(2, 2, 3, 3, 3), true, false},
		{"scaled to zero", deployment(2, 2, 0, 0, 0), true, false},
		{"progress deadline exceeded", failed, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, failed, msg := rollout(tc.d)
			if done != tc.done || failed != tc.failed || msg == "" {
				t.Fatalf("done=%v failed=%v (%q), want %v %v", done, failed, msg, tc.done, tc.failed)
			}
		})
	}
}

// kstatusOf computes what Flux, kpt and kubectl-based waiters conclude from
// a SimpleWebApp's status (the object with this status at this generation).
func kstatusOf(t *testing.T, gen int64, st webappv1.SimpleWebAppStatus) kstatus.Status {
	t.Helper()
	swa := &webappv1.SimpleWebApp{TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "SimpleWebApp"}, Status: st}
	swa.Name, swa.Namespace, swa.Generation = "x", "demo", gen
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(swa)
	if err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: m})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// Every outcome of a pass maps to the conditions and the kstatus result that
// GitOps tools act on: Available → Current, rolling out → InProgress, every
// terminal reason on a new generation → Failed within this one reconcile,
// RolledBack → Failed, a transient error → InProgress, suspended → whatever
// the running app is (never Failed).
func TestComputeStatus(t *testing.T) {
	const gen = 7
	prev := webappv1.SimpleWebAppStatus{ObservedGeneration: 6, AppliedGeneration: 6, Version: "1.0.0", LastHealthyVersion: "1.0.0",
		Inventory: []webappv1.ObjectReference{{Group: "apps", Kind: "Deployment", Name: "x-web"}}}
	setCondition(&prev, 6, webappv1.ConditionReady, metav1.ConditionTrue, webappv1.ReasonAvailable, "")
	done := deployment(3, 3, 2, 2, 2)
	rolling := deployment(3, 3, 2, 1, 2)
	applied := outcome{applied: true, release: render.Release{Version: "1.0.0", Channel: "stable"}, gate: gate{lastHealthy: "1.0.0"}}
	with := func(o outcome, f func(*outcome)) outcome { f(&o); return o }

	type want struct {
		ready, reconciling, stalled metav1.ConditionStatus
		reason                      string
		observed, appliedGen        int64
		kstatus                     kstatus.Status
	}
	cases := []struct {
		name string
		o    outcome
		want want
	}{
		{"available", with(applied, func(o *outcome) { o.workload = done }),
			want{"True", "False", "False", webappv1.ReasonAvailable, gen, gen, kstatus.CurrentStatus}},
		{"rolling out", with(applied, func(o *outcome) { o.workload = rolling }),
			want{"False", "True", "False", webappv1.ReasonProgressing, gen, gen, kstatus.InProgressStatus}},
		{"Deployment not created yet", applied,
			want{"False", "True", "False", webappv1.ReasonProgressing, gen, gen, kstatus.InProgressStatus}},
		{"announcing a version change", outcome{announcing: true, release: render.Release{Version: "1.1.0"}, workload: done},
			want{"False", "True", "False", webappv1.ReasonProgressing, gen, 6, kstatus.InProgressStatus}},
		{"rolled back", with(applied, func(o *outcome) {
			o.workload, o.heldBack, o.rolledBack = done, true, true
			o.gate.failedUpgrade = &webappv1.FailedUpgrade{Version: "1.1.0", Message: "not Ready within 5m"}
		}), want{"False", "False", "True", webappv1.ReasonRolledBack, gen, gen, kstatus.FailedStatus}},
		{"roll-out failed", with(applied, func(o *outcome) {
			d := deployment(3, 3, 2, 1, 1)
			d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
			o.workload = d
		}), want{"False", "False", "True", webappv1.ReasonRolloutFailed, gen, gen, kstatus.FailedStatus}},
		{"suspended, app available", outcome{suspended: true, workload: done},
			want{"True", "False", "False", webappv1.ReasonSuspended, gen, 6, kstatus.CurrentStatus}},
		{"suspended, app rolling", outcome{suspended: true, workload: rolling},
			want{"False", "False", "False", webappv1.ReasonSuspended, gen, 6, kstatus.InProgressStatus}},
	}
	for _, reason := range webappv1.TerminalReasons {
		if reason == webappv1.ReasonRolledBack || reason == webappv1.ReasonRolloutFailed {
			continue // outcomes of the health gate, above
		}
		cases = append(cases, struct {
			name string
			o    outcome
			want want
		}{"terminal " + reason, outcome{failure: &step.Error{Reason: reason, Message: "m", Terminal: true}, workload: done},
			want{"False", "False", "True", reason, gen, 6, kstatus.FailedStatus}})
	}
	for _, reason := range webappv1.TransientReasons {
		cases = append(cases, struct {
			name string
			o    outcome
			want want
		}{"transient " + reason, outcome{failure: &step.Error{Reason: reason, Message: "m"}, workload: done},
			want{"False", "True", "False", reason, 6, 6, kstatus.InProgressStatus}})
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			swa := &webappv1.SimpleWebApp{Status: *prev.DeepCopy()}
			swa.Generation = gen
			st := computeStatus(swa, tc.o)
			for typ, status := range map[string]metav1.ConditionStatus{
				webappv1.ConditionReady: tc.want.ready, webappv1.ConditionReconciling: tc.want.reconciling, webappv1.ConditionStalled: tc.want.stalled,
			} {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil || c.Status != status || c.Reason != tc.want.reason || c.ObservedGeneration != gen {
					t.Errorf("%s = %+v, want %s %s", typ, c, status, tc.want.reason)
				}
			}
			if st.ObservedGeneration != tc.want.observed || st.AppliedGeneration != tc.want.appliedGen {
				t.Errorf("observedGeneration %d appliedGeneration %d, want %d %d", st.ObservedGeneration, st.AppliedGeneration, tc.want.observed, tc.want.appliedGen)
			}
			if got := kstatusOf(t, gen, st); got != tc.want.kstatus {
				t.Errorf("kstatus %s, want %s", got, tc.want.kstatus)
			}
			covered[tc.want.reason] = true
		})
	}
	for _, r := range webappv1.AllReasons() {
		if !covered[r] {
			t.Errorf("reason %s has no case", r)
		}
	}
}

func TestSetApplied(t *testing.T) {
	prev := webappv1.SimpleWebAppStatus{AppliedGeneration: 1, Version: "1.0.0", Channel: "stable",
		Inventory: []webappv1.ObjectReference{{Kind: "ConfigMap", Name: "old"}}}
	inv := []webappv1.ObjectReference{{Kind: "ConfigMap", Name: "old"}, {Kind: "ConfigMap", Name: "new"}}

	st := *prev.DeepCopy()
	setApplied(&st, 2, outcome{failure: &step.Error{Reason: webappv1.ReasonApplyFailed}, inventory: inv, release: render.Release{Version: "1.1.0"}})
	if st.AppliedGeneration != 1 || st.Version != "1.0.0" || len(st.Inventory) != 2 {
		t.Errorf("a failed apply moved what is applied, or lost what it wrote: %+v", st)
	}
	st = *prev.DeepCopy()
	setApplied(&st, 2, outcome{applied: true, inventory: inv, release: render.Release{Version: "1.1.0"},
		gate: gate{lastHealthy: "1.0.0", upgrade: &webappv1.UpgradeStatus{From: "1.0.0", To: "1.1.0"}}})
	if st.AppliedGeneration != 2 || st.Version != "1.1.0" || st.Channel != "" || st.Upgrade == nil || len(st.Inventory) != 2 {
		t.Errorf("applied: %+v", st)
	}
}

func TestSetLastHandledReconcileAt(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    outcome
		want string
	}{
		{"handled", outcome{requestedAt: "t1"}, "t1"},
		{"ended in a terminal failure: handled", outcome{requestedAt: "t1", failure: &step.Error{Terminal: true}}, "t1"},
		{"transient failure: retried, not yet handled", outcome{requestedAt: "t1", failure: &step.Error{}}, "t0"},
		{"announcing: not yet handled", outcome{requestedAt: "t1", announcing: true}, "t0"},
		{"no request", outcome{}, "t0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := webappv1.SimpleWebAppStatus{LastHandledReconcileAt: "t0"}
			setLastHandledReconcileAt(&st, tc.o)
			if st.LastHandledReconcileAt != tc.want {
				t.Errorf("got %q, want %q", st.LastHandledReconcileAt, tc.want)
			}
		})
	}
}

// A version change writes Ready=False before the apply; once the new version
// is rolled out a pass says Ready=True again, and the transition times only
// move when the status does.
func TestAnnounceThenAvailable(t *testing.T) {
	swa := &webappv1.SimpleWebApp{Status: webappv1.SimpleWebAppStatus{Version: "1.0.0", LastHealthyVersion: "1.0.0"}}
	swa.Generation = 1
	swa.Status = computeStatus(swa, outcome{applied: true, release: render.Release{Version: "1.0.0"}, workload: deployment(1, 1, 1, 1, 1), gate: gate{lastHealthy: "1.0.0"}})
	if !isReady(swa) {
		t.Fatalf("not ready: %+v", swa.Status.Conditions)
	}
	swa.Status = computeStatus(swa, outcome{announcing: true, release: render.Release{Version: "1.1.0"}, workload: deployment(1, 1, 1, 1, 1)})
	c := meta.FindStatusCondition(swa.Status.Conditions, webappv1.ConditionReady)
	if isReady(swa) || c.Message != "applying version 1.1.0 (was 1.0.0)" || swa.Status.Version != "1.0.0" {
		t.Fatalf("announce: %+v version %s", c, swa.Status.Version)
	}
	again := computeStatus(swa, outcome{announcing: true, release: render.Release{Version: "1.1.0"}, workload: deployment(1, 1, 1, 1, 1)})
	if !meta.FindStatusCondition(again.Conditions, webappv1.ConditionReady).LastTransitionTime.Equal(&c.LastTransitionTime) {
		t.Error("an unchanged condition moved its transition time")
	}
}

// The status written before a first apply (with the inventory) is the one
// the apply ends in, so the write after the apply is skipped; when the apply
// fails instead, status is computed from the one before the pass.
func TestPredictApplied(t *testing.T) {
	swa := &webappv1.SimpleWebApp{Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](3)}}
	swa.Name, swa.Namespace, swa.Generation, swa.UID = "x", "demo", 1, "uid-1"
	d := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "x-web", "namespace": "demo"},
		"spec": map[string]any{"replicas": int64(3),
			"selector": map[string]any{"matchLabels": map[string]any{render.LabelInstance: "x"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{render.LabelInstance: "x"}}}},
	}}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "x-web-content", "namespace": "demo"}}}
	rendered := &render.Rendered{Objects: []*unstructured.Unstructured{cm, d}}
	inv := inventoryOf(rendered.Objects)
	rel := render.Release{Channel: "stable", Version: "1.0.0"}

	predicted := predictApplied(swa, rendered, inv, outcome{release: rel})
	if predicted == nil {
		t.Fatal("no prediction for a first apply")
	}
	if predicted.ObservedGeneration != 1 || predicted.AppliedGeneration != 1 || predicted.Version != "1.0.0" || len(predicted.Inventory) != 2 || predicted.PodsReady != "0/3" {
		t.Errorf("predicted %+v", predicted)
	}
	if meta.IsStatusConditionTrue(predicted.Conditions, webappv1.ConditionReady) || !meta.IsStatusConditionTrue(predicted.Conditions, webappv1.ConditionReconciling) {
		t.Errorf("predicted conditions %+v", predicted.Conditions)
	}

	// The apply succeeded: the Deployment as the API server returned it.
	prior := swa.Status.DeepCopy()
	swa.Status = *predicted.DeepCopy()
	live := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, live); err != nil {
		t.Fatal(err)
	}
	live.Generation = 1
	after := computeStatus(swa, outcome{release: rel, applied: true, objects: rendered.Objects, inventory: inv, workload: live, unconfirmed: prior})
	if diff := cmpStatus(*predicted, after); diff != "" {
		t.Errorf("the status after the apply differs from the predicted one (a third write): %s", diff)
	}

	// The apply failed: nothing claims it was applied, the inventory stays.
	failed := computeStatus(swa, outcome{release: rel, inventory: inv, unconfirmed: prior,
		failure: &step.Error{Reason: webappv1.ReasonApplyFailed, Message: "forbidden"}})
	if failed.AppliedGeneration != 0 || failed.Version != "" || failed.PodsReady != "" || len(failed.Inventory) != 2 {
		t.Errorf("after a failed apply: %+v", failed)
	}
	if c := meta.FindStatusCondition(failed.Conditions, webappv1.ConditionReconciling); c == nil || c.Reason != webappv1.ReasonApplyFailed {
		t.Errorf("after a failed apply: conditions %+v", failed.Conditions)
	}

	// An app that has a Deployment already: its next generation is unknown.
	swa.Status.Inventory = inv
	if p := predictApplied(swa, rendered, inv, outcome{release: rel}); p != nil {
		t.Errorf("predicted for an app with a Deployment: %+v", p)
	}
}

func cmpStatus(a, b webappv1.SimpleWebAppStatus) string {
	if equality.Semantic.DeepEqual(a, b) {
		return ""
	}
	return fmt.Sprintf("\n predicted %+v\n after     %+v", a, b)
}
