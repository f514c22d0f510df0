package render

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// aliasBomb is a valid 11 KiB strategic merge patch whose aliases expand to
// 20^levels copies of a 2,000-character string. The padding (4,500 plain
// list elements) keeps the share of aliased nodes under the limit at which
// sigs.k8s.io/yaml gives up, so it expands there: levels 3 is 16 MB of
// strings, levels 4 is 320 MB.
func aliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("spec:\n  template:\n    metadata:\n      annotations:\n")
	b.WriteString("        pad: [" + strings.TrimSuffix(strings.Repeat("a,", 4500), ",") + "]\n")
	b.WriteString("        l0: &l0 " + strings.Repeat("x", 2000) + "\n")
	for i := 1; i <= levels; i++ {
		ref := fmt.Sprintf("*l%d", i-1)
		fmt.Fprintf(&b, "        l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(ref+",", 20), ","))
	}
	return b.String()
}

// An alias bomb is refused before it is expanded: the refusal names the
// patch and the rule, and preparing it allocates kilobytes, not the
// gigabytes its expansion would take.
func TestPreparePatchesRefusesAnAliasBombUnexpanded(t *testing.T) {
	bomb := aliasBomb(3)
	if len(bomb) > maxPatchBytes {
		t.Fatalf("the bomb is %d bytes", len(bomb))
	}
	patches := []webappv1.Patch{dep("spec:\n  replicas: 2\n"), dep(bomb)}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := preparePatches(patches)
	runtime.ReadMemStats(&after)
	if reasonOf(err) != webappv1.ReasonPatchNotAllowed || !strings.Contains(err.Error(), "spec.patches[1]") ||
		!strings.Contains(err.Error(), "anchors and aliases") {
		t.Fatalf("got %v, want a terminal PatchNotAllowed naming spec.patches[1] and anchors and aliases", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("preparing the bomb allocated %d bytes: it was expanded", alloc)
	}
	// Render refuses it the same way, before kustomize runs.
	if _, err := renderWith(stableRelease(t), dep(bomb)); reasonOf(err) != webappv1.ReasonPatchNotAllowed {
		t.Fatalf("Render: got %v, want PatchNotAllowed", err)
	}
}

func TestPreparePatches(t *testing.T) {
	for _, tc := range []struct {
		name   string
		patch  webappv1.Patch
		reason string // "" when the patch passes
		want   string // in the message, or in the prepared patch
	}{
		{"a strategic merge patch gets a header", dep("spec:\n  replicas: 2\n"), "", `"kind":"Deployment"`},
		{"JSON passes", svc(`{"metadata":{"annotations":{"a":"b"}}}`), "", `"apiVersion":"v1"`},
		{"a JSON 6902 list passes unchanged", dep("- op: replace\n  path: /spec/replicas\n  value: 2\n"), "", `[{"op":"replace"`},
		{"an anchor alone", dep("spec: &s\n  replicas: 2\n"), webappv1.ReasonPatchNotAllowed, "anchors and aliases are not allowed (line 1)"},
		{"a merge key", dep("a: &a {x: 1}\nspec:\n  <<: *a\n"), webappv1.ReasonPatchNotAllowed, "anchors and aliases"},
		{"an alias in a JSON 6902 value", dep("- op: add\n  path: /a\n  value: &v [1]\n- op: add\n  path: /b\n  value: *v\n"), webappv1.ReasonPatchNotAllowed, "anchors and aliases"},
		{"two documents", dep("spec: {}\n---\nspec: {}\n"), webappv1.ReasonPatchNotAllowed, "more than one YAML document"},
		{"too deep", dep(strings.Repeat("[", 40) + strings.Repeat("]", 40)), webappv1.ReasonPatchNotAllowed, "nested deeper than 32"},
		{"too long", dep("a: " + strings.Repeat("x", maxPatchBytes)), webappv1.ReasonPatchNotAllowed, "more than the limit of 16 KiB"},
		// JSON writes each "<" as \u003c: 16 KiB of YAML, 96 KiB of JSON.
		{"decodes too large", dep(`a: "` + strings.Repeat("<", maxPatchBytes-10) + `"`), webappv1.ReasonPatchNotAllowed, "decodes to"},
		{"copy", dep("- op: copy\n  from: /spec\n  path: /x\n"), webappv1.ReasonPatchNotAllowed, `op "copy" is not allowed`},
		{"a scalar", dep("just text\n"), webappv1.ReasonRenderFailed, "neither a partial object nor a list"},
		{"not YAML", dep("a: [\n"), webappv1.ReasonRenderFailed, "not valid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := preparePatches([]webappv1.Patch{tc.patch})
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out[0].Patch, tc.want) {
					t.Fatalf("prepared %s, want it to contain %s", out[0].Patch, tc.want)
				}
				return
			}
			if reasonOf(err) != tc.reason || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "spec.patches[0]") {
				t.Fatalf("got %v, want a terminal %s naming spec.patches[0] with %q", err, tc.reason, tc.want)
			}
		})
	}
}
