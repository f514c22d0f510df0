package render

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A package's directives, each on its own: include-when drops an object,
// min-operator-version refuses a package this build cannot render, and the
// handoff fields are split off (applied as HandoffManager) unless handed
// off. None of the annotations reaches the cluster.
func TestApplyDirectives(t *testing.T) {
	instance := map[string]any{"spec": map[string]any{"replicas": int64(3), "autoscaling": nil}}
	obj := func(ann map[string]string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(3), "paused": false}}}
		o.SetAPIVersion("apps/v1")
		o.SetKind("Deployment")
		o.SetName("web")
		o.SetAnnotations(ann)
		return o
	}
	rel := Release{Version: "1.2.3"}
	for _, tc := range []struct {
		name            string
		ann             map[string]string
		objects, reason string // objects: "kept" or "dropped"; reason: a refusal's
		handoff         bool   // a partial object with spec.replicas
		replicasKept    bool   // spec.replicas stays on the object
	}{
		{"no directives", nil, "kept", "", false, true},
		{"include-when true", map[string]string{AnnotationIncludeWhen: "self.spec.replicas > 1"}, "kept", "", false, true},
		{"include-when false", map[string]string{AnnotationIncludeWhen: "self.spec.replicas > 5"}, "dropped", "", false, false},
		{"include-when not CEL", map[string]string{AnnotationIncludeWhen: "self.spec.("}, "", "RenderFailed", false, false},
		{"an older operator suffices", map[string]string{AnnotationMinOperatorVersion: "0.0.1"}, "kept", "", false, true},
		{"a newer operator is needed", map[string]string{AnnotationMinOperatorVersion: "99.0.0"}, "", "OperatorTooOld", false, false},
		{"a malformed version", map[string]string{AnnotationMinOperatorVersion: "soon"}, "", "RenderFailed", false, false},
		{"handoff fields applied by the handoff manager", map[string]string{AnnotationHandoffFields: "spec.replicas"}, "kept", "", true, false},
		{"handoff fields handed off", map[string]string{AnnotationHandoffFields: "spec.replicas", AnnotationHandoffWhen: "self.spec.replicas == 3"}, "kept", "", false, false},
		{"handoff kept while its condition is false", map[string]string{AnnotationHandoffFields: "spec.replicas", AnnotationHandoffWhen: "self.spec.replicas == 4"}, "kept", "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := applyDirectives(rel, []*unstructured.Unstructured{obj(tc.ann)}, instance)
			if tc.reason != "" {
				if reasonOf(err) != tc.reason {
					t.Fatalf("got %v, want a terminal %s", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := map[bool]string{true: "kept", false: "dropped"}[len(r.Objects) == 1]; got != tc.objects {
				t.Fatalf("object %s, want %s", got, tc.objects)
			}
			if len(r.Objects) == 0 {
				return
			}
			o := r.Objects[0]
			if len(o.GetAnnotations()) != 0 {
				t.Errorf("annotations left on the object: %v", o.GetAnnotations())
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas"); found != tc.replicasKept {
				t.Errorf("spec.replicas on the object: %v, want %v", found, tc.replicasKept)
			}
			if got := len(r.Handoffs) == 1 && r.Handoffs[0].Object["spec"].(map[string]any)["replicas"] == int64(3); got != tc.handoff {
				t.Errorf("handoff partial %v, want %v", r.Handoffs, tc.handoff)
			}
			if fields := r.HandoffFields[Identity(o)]; tc.ann[AnnotationHandoffFields] != "" && !slices.Equal(fields, []string{"spec.replicas"}) {
				t.Errorf("HandoffFields %v, want [spec.replicas] whether handed off or not", fields)
			}
		})
	}
}
