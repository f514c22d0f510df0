package render

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The patch policy, difference by difference: what a package lists is
// patchable below its path, metadata is reserved but for new labels and
// annotations outside the reserved prefixes.
func TestPatchPolicyAllows(t *testing.T) {
	p := &patchPolicy{Patchable: map[string][]string{
		"Deployment": {"spec.template.spec.containers[*].resources", "spec.template.spec.tolerations", "spec.template.metadata.labels"},
	}, MetadataKeys: metadataKeys{Prefixes: []string{"user.example.com/"}, Keys: []string{"team"}}}
	d := func(before any, segs ...string) difference {
		return difference{segments: segs, before: before, after: "x"}
	}
	for _, tc := range []struct {
		name string
		kind string
		diff difference
		ok   bool
		why  string
	}{
		{"a listed path", "Deployment", d(nil, "spec", "template", "spec", "tolerations"), true, ""},
		{"below a listed path", "Deployment", d(nil, "spec", "template", "spec", "containers", "[name=web]", "resources", "limits", "cpu"), true, ""},
		{"a list element by index", "Deployment", d(nil, "spec", "template", "spec", "containers", "[0]", "resources"), true, ""},
		{"beside a listed path", "Deployment", d(nil, "spec", "template", "spec", "containers", "[name=web]", "image"), false, "not patchable"},
		{"above a listed path", "Deployment", d(nil, "spec", "template", "spec"), false, "not patchable"},
		{"another kind lists nothing", "Service", d(nil, "spec", "template", "spec", "tolerations"), false, "not patchable"},
		{"a new pod label the package allows by key", "Deployment", d(nil, "spec", "template", "metadata", "labels", "team"), true, ""},
		{"a new pod label the package allows by prefix", "Deployment", d(nil, "spec", "template", "metadata", "labels", "user.example.com/x"), true, ""},
		{"a new pod label the package does not allow", "Deployment", d(nil, "spec", "template", "metadata", "labels", "app"), false, "lets patches add label and annotation keys"},
		{"a prefix is matched whole", "Deployment", d(nil, "spec", "template", "metadata", "labels", "user.example.com.evil/x"), false, "lets patches add label and annotation keys"},
		{"a label the package sets", "Deployment", d("web", "spec", "template", "metadata", "labels", "app"), false, "patches may only add keys"},
		{"a reserved label prefix", "Deployment", d(nil, "spec", "template", "metadata", "labels", "applyset.kubernetes.io/part-of"), false, "reserved prefix applyset.kubernetes.io/"},
		{"a reserved annotation, unlisted or not", "Deployment", d(nil, "metadata", "annotations", "simplewebapp.example.com/include-when"), false, "reserved prefix simplewebapp.example.com/"},
		{"a finalizer", "Deployment", d(nil, "metadata", "finalizers"), false, "reserved: under metadata"},
		{"the name", "Deployment", d("a", "metadata", "name"), false, "reserved: under metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := p.allows(tc.kind, tc.diff)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Fatalf("allows = %v %q, want %v %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}

// diff names each difference by its path, lists of named elements matched
// by name, and reports nothing for equal objects.
func TestDiff(t *testing.T) {
	obj := func(image string, env ...string) map[string]any {
		var e []any
		for _, n := range env {
			e = append(e, map[string]any{"name": n, "value": "1"})
		}
		return map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": image, "env": e}}}}
	}
	for _, tc := range []struct {
		name string
		a, b map[string]any
		want []string
	}{
		{"equal", obj("i", "A"), obj("i", "A"), nil},
		{"a changed field", obj("i"), obj("j"), []string{"spec.containers[name=web].image"}},
		{"an added named element", obj("i", "A"), obj("i", "A", "B"), []string{"spec.containers[name=web].env[name=B].name", "spec.containers[name=web].env[name=B].value"}},
		{"an added field", map[string]any{}, map[string]any{"spec": map[string]any{"x": int64(1)}}, []string{"spec.x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range diff(nil, tc.a, tc.b) {
				got = append(got, d.path())
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("diff = %v, want %v", got, tc.want)
			}
		})
	}
}

// check refuses a render with other objects than the base's before it
// looks at any field.
func TestPatchPolicyCheckIdentities(t *testing.T) {
	u := func(kind, name string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("v1")
		o.SetKind(kind)
		o.SetName(name)
		return o
	}
	p := &patchPolicy{}
	if err := p.check([]*unstructured.Unstructured{u("Service", "a")}, []*unstructured.Unstructured{u("Service", "b")}); reasonOf(err) != "PatchNotAllowed" || !strings.Contains(err.Error(), "not add, rename or move") {
		t.Fatalf("renamed object: %v", err)
	}
	if err := p.check([]*unstructured.Unstructured{u("Service", "a")}, []*unstructured.Unstructured{u("Service", "a")}); err != nil {
		t.Fatalf("the same objects: %v", err)
	}
}
