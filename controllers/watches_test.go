package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// An annotation update wakes the reconciler exactly when it changes the
// request the pipeline reads (webappv1.RequestedReconcileAt).
func TestReconcileRequestedPredicate(t *testing.T) {
	const ours, flux = webappv1.AnnotationReconcileRequestedAt, webappv1.AnnotationFluxReconcileRequestedAt
	for _, tc := range []struct {
		name     string
		old, new map[string]string
		want     bool
	}{
		{"ours set", nil, map[string]string{ours: "t1"}, true},
		{"ours changed", map[string]string{ours: "t1"}, map[string]string{ours: "t2"}, true},
		{"Flux's set", nil, map[string]string{flux: "2026-12-01T12:00:00Z"}, true},
		{"Flux's changed", map[string]string{flux: "2026-12-01T12:00:00Z"}, map[string]string{flux: "2026-12-01T12:00:01.5Z"}, true},
		{"Flux's set later than ours", map[string]string{ours: "2026-12-01T12:00:00Z"},
			map[string]string{ours: "2026-12-01T12:00:00Z", flux: "2026-12-01T12:05:00Z"}, true},
		{"Flux's set earlier than ours: no new request", map[string]string{ours: "2026-12-01T12:00:00Z"},
			map[string]string{ours: "2026-12-01T12:00:00Z", flux: "2026-12-01T11:00:00Z"}, false},
		{"another annotation", map[string]string{ours: "t1"}, map[string]string{ours: "t1", "x": "y"}, false},
	} {
		e := event.UpdateEvent{
			ObjectOld: &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Annotations: tc.old}},
			ObjectNew: &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Annotations: tc.new}},
		}
		if got := reconcileRequested.Update(e); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
