package integration

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/testkit"
)

// The API server rejects bad specs with a message naming the field: the CRD
// schema (OpenAPI + CEL) and strict field validation, not operator code.
func TestInvalidSpecsAreRejected(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	patch := func(kind, body string) any {
		return []any{map[string]any{"target": map[string]any{"kind": kind}, "patch": body}}
	}
	manyPatches := []any{}
	for range 17 {
		manyPatches = append(manyPatches, map[string]any{"target": map[string]any{"kind": "Service"}, "patch": "{}"})
	}
	cases := []struct {
		name  string
		spec  map[string]any
		field string // must appear in the error
		says  string // and so must this
	}{
		{"negative replicas", map[string]any{"replicas": -1}, "spec.replicas", "greater than or equal to 0"},
		{"too many replicas", map[string]any{"replicas": 101}, "spec.replicas", "less than or equal to 100"},
		{"replicas not a number", map[string]any{"replicas": "three"}, "spec.replicas", "integer"},
		{"empty message", map[string]any{"message": ""}, "spec.message", "at least 1 chars"},
		{"blank message", map[string]any{"message": "   "}, "spec.message", "non-space"},
		{"oversized message", map[string]any{"message": strings.Repeat("x", 4097)}, "spec.message", "more than 4096 bytes"},
		{"uppercase channel", map[string]any{"channel": "Stable"}, "spec.channel", "should match"},
		{"channel with digits", map[string]any{"channel": "v2"}, "spec.channel", "should match"},
		{"two-part version", map[string]any{"version": "1.0"}, "spec.version", "should match"},
		{"v-prefixed version", map[string]any{"version": "v1.0.0"}, "spec.version", "should match"},
		{"leading zero version", map[string]any{"version": "01.0.0"}, "spec.version", "should match"},
		{"image with space", map[string]any{"image": "nginx latest"}, "spec.image", "should match"},
		{"image with uppercase repo", map[string]any{"image": "Nginx:1.27"}, "spec.image", "should match"},
		{"image with empty tag", map[string]any{"image": "nginx:"}, "spec.image", "should match"},
		{"unknown field", map[string]any{"replica": 3}, "spec.replica", "unknown field"},
		{"patch of a ConfigMap", map[string]any{"patches": patch("ConfigMap", "{}")}, "spec.patches[0].target.kind", "Unsupported value"},
		{"patch of a Secret", map[string]any{"patches": patch("Secret", "{}")}, "spec.patches[0].target.kind", "Unsupported value"},
		{"empty patch", map[string]any{"patches": patch("Service", "")}, "spec.patches[0].patch", "at least 1 chars"},
		{"patch without target", map[string]any{"patches": []any{map[string]any{"patch": "{}"}}}, "spec.patches[0].target", "Required value"},
		{"too many patches", map[string]any{"patches": manyPatches}, "spec.patches", "must have at most 16 items"},
	}
	if len(cases) < 15 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := webApp(ns, "invalid", tc.spec)
			err := k8s.Create(context.Background(), obj, client.FieldValidation("Strict")) // as kubectl does
			if err == nil {
				_ = k8s.Delete(context.Background(), obj)
				t.Fatalf("spec %v was accepted", tc.spec)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.says) {
				t.Fatalf("error does not name %q with %q:\n%s", tc.field, tc.says, msg)
			}
		})
	}

	t.Run("name too long for rendered objects", func(t *testing.T) {
		err := k8s.Create(context.Background(), webApp(ns, strings.Repeat("n", 53), map[string]any{}))
		if err == nil || !strings.Contains(err.Error(), "metadata.name must be at most 52 characters") {
			t.Fatalf("got %v", err)
		}
	})

	// Names must make valid child names: the Service <name>-web is a DNS-1035
	// label, so no leading digit and no dot.
	for _, name := range []string{"1app", "a.b"} {
		t.Run("name "+name, func(t *testing.T) {
			err := k8s.Create(context.Background(), webApp(ns, name, map[string]any{}))
			if err == nil || !strings.Contains(err.Error(), "DNS-1035") || !strings.Contains(err.Error(), "<name>-web") {
				t.Fatalf("got %v", err)
			}
		})
	}

	// Defaults come from the API server, as in the user's CRD.
	t.Run("defaults", func(t *testing.T) {
		obj := webApp(ns, "defaulted", nil)
		if err := k8s.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
		spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
		if spec["replicas"] != int64(1) || spec["message"] != "Hello, Kubernetes Operator!" || spec["channel"] != "stable" {
			t.Fatalf("defaults not applied: %v", spec)
		}
	})
}

func webApp(ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "SimpleWebApp",
		"metadata":   map[string]any{"name": name, "namespace": ns},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}
