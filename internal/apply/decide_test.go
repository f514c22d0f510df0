package apply

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The applier's choice for one object, from the cache alone: every path
// of ensure's decision, without a request.
func TestDecide(t *testing.T) {
	obj := func(hash string, fields map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": fields}}
		u.SetAnnotations(map[string]string{AnnotationAppliedHash: hash})
		return u
	}
	desired := obj("h1", map[string]any{"paused": false, "template": "v1"})
	live := func(hash string, fields map[string]any) map[string]any { return obj(hash, fields).Object }
	asApplied := live("h1", map[string]any{"paused": false, "template": "v1", "defaulted": int64(1)})
	partial := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(3)}}}
	for _, tc := range []struct {
		name    string
		seen    observed
		partial *unstructured.Unstructured
		force   bool
		want    decision
	}{
		{"missing: create", observed{}, nil, false, decision{action: actionCreate}},
		{"missing, but just written: wait for the cache", observed{wroteRecently: true}, nil, false, decision{action: actionWaitForCache}},
		{"someone else's object: refuse", observed{exists: true}, nil, false, decision{action: actionRefuse}},
		{"cache behind our write: wait", observed{exists: true, controlled: true, behind: true}, nil, false, decision{action: actionWaitForCache}},
		{"as applied: nothing", observed{exists: true, controlled: true, live: asApplied}, nil, false, decision{action: actionNone}},
		{"as applied, a reconcile requested: apply", observed{exists: true, controlled: true, live: asApplied}, nil, true,
			decision{action: actionApply, applyObject: true}},
		{"the render changed: apply, not a correction", observed{exists: true, controlled: true, live: live("h0", map[string]any{"paused": false, "template": "v0"})}, nil, false,
			decision{action: actionApply, applyObject: true}},
		{"hand-edited: apply as a correction", observed{exists: true, controlled: true, live: live("h1", map[string]any{"paused": true, "template": "v1"})}, nil, false,
			decision{action: actionApply, applyObject: true, correction: true}},
		{"a foreign manager owns sensitive fields: a correction", observed{exists: true, controlled: true, live: asApplied, foreignSensitive: true}, nil, false,
			decision{action: actionApply, applyObject: true, correction: true}},
		{"handoff fields missing: apply them only", observed{exists: true, controlled: true, live: asApplied}, partial, false,
			decision{action: actionApply, applyHandoff: true}},
		{"handoff fields held: nothing", observed{exists: true, controlled: true, live: live("h1", map[string]any{"paused": false, "template": "v1", "replicas": int64(3)})}, partial, false,
			decision{action: actionNone}},
		{"a requested reconcile applies the handoff fields too", observed{exists: true, controlled: true, live: asApplied}, partial, true,
			decision{action: actionApply, applyObject: true, applyHandoff: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.seen, desired, tc.partial, tc.force); got != tc.want {
				t.Fatalf("decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}
