package v1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRequestedReconcileAt(t *testing.T) {
	const (
		early = "2026-12-01T12:00:00Z"
		late  = "2026-12-01T12:00:01Z"
		// Flux writes RFC 3339 with nanoseconds; as a string it sorts
		// before early ('.' < 'Z') although it is later.
		fluxNano = "2026-12-01T12:00:00.5Z"
		// Argo CD's reconcile action for Flux objects writes this shape.
		notATime = "By Argo CD at: 2026-12-01T12:00:02"
	)
	for _, tc := range []struct {
		name       string
		ours, flux string
		want       string
	}{
		{"neither", "", "", ""},
		{"ours only", early, "", early},
		{"ours only, not a time", "now", "", "now"},
		{"Flux's only", "", late, late},
		{"Flux's only, not a time", "", notATime, notATime},
		{"both, Flux's later", early, late, late},
		{"both, ours later", late, early, late},
		{"both, Flux's later by a fraction of a second", early, fluxNano, fluxNano},
		{"both, the same instant: ours", early, "2026-12-01T13:00:00+01:00", early},
		{"both, the same value", early, early, early},
		{"both, Flux's not a time", early, notATime, early},
		{"both, ours not a time", "now", early, early},
		{"both not times: ours", "now", notATime, "now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{"unrelated": "x"}
			if tc.ours != "" {
				ann[AnnotationReconcileRequestedAt] = tc.ours
			}
			if tc.flux != "" {
				ann[AnnotationFluxReconcileRequestedAt] = tc.flux
			}
			swa := &SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}
			if got := RequestedReconcileAt(swa); got != tc.want {
				t.Errorf("RequestedReconcileAt(ours %q, Flux's %q) = %q, want %q", tc.ours, tc.flux, got, tc.want)
			}
		})
	}
	if got := RequestedReconcileAt(&SimpleWebApp{}); got != "" {
		t.Errorf("no annotations: %q", got)
	}
}
