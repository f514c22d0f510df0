package render

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// envPatch sets n env entries (name and value) on the web container.
func envPatch(first, n int) webappv1.Patch {
	var b strings.Builder
	b.WriteString("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        env:\n")
	for i := first; i < first+n; i++ {
		fmt.Fprintf(&b, "        - {name: E%d, value: v%d}\n", i, i)
	}
	return dep(b.String())
}

// nullMap is a flow map of maps of one-letter keys without values: about
// two bytes of YAML a value, depth levels deep.
func nullMap(depth int) string {
	keys := make([]string, 0, 52)
	for c := 'a'; c <= 'z'; c++ {
		keys = append(keys, string(c), strings.ToUpper(string(c)))
	}
	if depth == 1 {
		return "{" + strings.Join(keys, ",") + "}"
	}
	inner := nullMap(depth - 1)
	entries := make([]string, len(keys))
	for i, k := range keys {
		entries[i] = k + ": " + inner
	}
	return "{" + strings.Join(entries, ",") + "}"
}

func TestPatchShapeLimits(t *testing.T) {
	spread := func(patches, each int) []webappv1.Patch {
		out := make([]webappv1.Patch, patches)
		for p := range out {
			out[p] = envPatch(p*each, each)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		patches []webappv1.Patch
		refused string // "" when allowed
	}{
		{"256 list entries over 16 patches", spread(16, 15), ""},
		{"one list at its limit", spread(1, 128), ""},
		{"one list too long", spread(1, 129), "list spec.template.spec.containers[].env has 129 entries"},
		{"258 list entries over three patches", append(spread(2, 127), envPatch(1000, 1)), "spec.patches[0..2] hold 258 list entries together"},
		{"too many operations", []webappv1.Patch{dep("[" + strings.Repeat("{op: test, path: /kind, value: Deployment},", 129) + "]")}, "list of operations has 129 entries"},
		{"too many values", []webappv1.Patch{dep("metadata: {labels: " + nullMap(2) + ", annotations: " + nullMap(2) + "}")}, "more than 4096 values"},
		{"the CPU bomb", testkit.CPUBomb(), "spec.patches[0]: list spec.template.spec.containers[].env has"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			templates := newTemplates(8<<20, nil)
			swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "demo"},
				Spec: webappv1.SimpleWebAppSpec{Patches: tc.patches}}
			_, err := render(stableRelease(t), swa, templates)
			if tc.refused == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if r := reasonOf(err); r != webappv1.ReasonPatchNotAllowed || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("got %v, want %s with %q", err, webappv1.ReasonPatchNotAllowed, tc.refused)
			}
			// Refused before kustomize: the bomb costs no merge at all.
			if runs := templates.kustomizeRuns.Load(); runs != 0 {
				t.Fatalf("%d kustomize runs for a refused patch", runs)
			}
		})
	}
}
