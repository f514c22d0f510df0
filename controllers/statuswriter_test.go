package controllers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

// A status change waits for the batch window only when the pass has
// nothing else to report and the operator wrote this SimpleWebApp (or a
// child) within the window.
func TestMayWait(t *testing.T) {
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	swa.Status = webappv1.SimpleWebAppStatus{ReadyReplicas: 1, Conditions: []metav1.Condition{
		{Type: webappv1.ConditionReady, Status: metav1.ConditionFalse, Reason: webappv1.ReasonProgressing, Message: "1 of 3 pods ready"},
	}}
	progress := *swa.Status.DeepCopy()
	progress.ReadyReplicas, progress.Conditions[0].Message = 2, "2 of 3 pods ready"
	ready := *progress.DeepCopy()
	ready.Conditions[0].Status, ready.Conditions[0].Reason = metav1.ConditionTrue, webappv1.ReasonAvailable
	unobserved := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: appsv1.DeploymentStatus{ObservedGeneration: 1}}

	for _, tc := range []struct {
		name    string
		touched bool
		o       outcome
		next    webappv1.SimpleWebAppStatus
		want    bool
	}{
		{"progress within the window", true, outcome{}, progress, true},
		{"the controller has not observed the generation, within the window", true, outcome{workload: unobserved}, ready, true},
		{"progress, no write of ours lately", false, outcome{}, progress, false},
		{"a condition's status changed", true, outcome{}, ready, false},
		{"nothing changed", true, outcome{}, *swa.Status.DeepCopy(), false},
		{"the pass wrote a child", true, outcome{writes: 1}, progress, false},
		{"the pass took fields over", true, outcome{takenOver: []string{"kubectl"}}, progress, false},
		{"the pass pruned", true, outcome{pruned: []webappv1.ObjectReference{{Kind: "ConfigMap", Name: "old"}}}, progress, false},
		{"the pass rolled back", true, outcome{rolledBack: true}, progress, false},
		{"the pass failed", true, outcome{failure: &step.Error{Reason: webappv1.ReasonApplyFailed}}, progress, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &statusWriter{writes: &apply.OwnWrites{}, batch: time.Minute}
			if tc.touched {
				w.touch(swa)
			}
			if got := w.mayWait(swa, tc.o, tc.next); got != tc.want {
				t.Fatalf("mayWait = %v, want %v", got, tc.want)
			}
		})
	}
}

// Only a roll-out's progress (pod counts, messages) may wait for the status
// batch; any change of a condition's status, reason or generation, of the
// version or the inventory is written at once. The statuses come from
// computeStatus over a new app's roll-out, as the reconciler sees it.
func TestProgressOnly(t *testing.T) {
	swa := &webappv1.SimpleWebApp{}
	swa.Generation = 1
	at := func(d *appsv1.Deployment) webappv1.SimpleWebAppStatus {
		return computeStatus(swa, outcome{applied: true, release: render.Release{Version: "1.0.0"}, workload: d})
	}
	created := at(deployment(1, 0, 2, 0, 0)) // as predicted before the create
	observed := at(deployment(1, 1, 2, 2, 0))
	oneUp := at(deployment(1, 1, 2, 2, 1))
	available := at(deployment(1, 1, 2, 2, 2))
	swa.Generation = 2
	newGeneration := at(deployment(2, 1, 2, 2, 2))
	moved := *available.DeepCopy()
	moved.Version = "1.1.0"
	pruned := *available.DeepCopy()
	pruned.Inventory = append(pruned.Inventory, webappv1.ObjectReference{Kind: "ConfigMap", Name: "old"})
	fewer := *available.DeepCopy()
	fewer.Conditions = fewer.Conditions[:1]

	for _, tc := range []struct {
		name      string
		cur, next webappv1.SimpleWebAppStatus
		want      bool
	}{
		{"nothing changed: nothing to write", available, available, false},
		{"the Deployment controller observed it: counts and message", created, observed, true},
		{"a pod became available, still progressing", observed, oneUp, true},
		{"Ready turns True", oneUp, available, false},
		{"a new generation", available, newGeneration, false},
		{"another version", available, moved, false},
		{"another inventory", available, pruned, false},
		{"a condition fewer", available, fewer, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := progressOnly(tc.cur, tc.next); got != tc.want {
				t.Errorf("progressOnly = %v, want %v\ncur:  %+v\nnext: %+v", got, tc.want, tc.cur, tc.next)
			}
		})
	}
}
