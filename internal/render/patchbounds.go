package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// Limits on the shape of spec.patches, checked on the decoded patches before
// kustomize sees them. Bytes alone do not bound kustomize's work: a strategic
// merge of lists keyed by name (env, ports, volumes) costs roughly the square
// of the entries merged, so 16 patches of short env names inside every byte
// limit hold a core for minutes. Kustomize cannot be stopped once it runs, so
// these are checked first and a refusal costs no kustomize run.
const (
	// maxPatchNodes caps the values (maps, lists, scalars) of one patch.
	maxPatchNodes = 4096
	// maxPatchListLength caps the entries of one list in a patch.
	maxPatchListLength = 128
	// maxPatchListElements caps list entries over all of an object's
	// patches: what the merge's cost grows with.
	maxPatchListElements = 256
)

// checkPatchShape refuses patch i when its shape could make kustomize's
// merge expensive, naming the patch and, for a long list, where it is.
// total carries the list entries of the patches before it, so a large
// SimpleWebApp is refused at the first patch over the limit, not after all
// of them were decoded.
func checkPatchShape(i int, v any, total *int) error {
	var s patchShape
	if err := s.walk(v, ""); err != nil {
		return step.Stalled(webappv1.ReasonPatchNotAllowed, "spec.patches[%d]: %v", i, err)
	}
	if *total += s.listElements; *total > maxPatchListElements {
		return step.Stalled(webappv1.ReasonPatchNotAllowed, "spec.patches[0..%d] hold %d list entries together, more than the limit of %d: set fewer entries", i, *total, maxPatchListElements)
	}
	return nil
}

// patchShape counts one patch's values and list entries.
type patchShape struct {
	nodes        int
	listElements int
}

// walk visits maps in key order, so a refusal names the same list every time.
func (s *patchShape) walk(v any, at string) error {
	if s.nodes++; s.nodes > maxPatchNodes {
		return fmt.Errorf("more than %d values", maxPatchNodes)
	}
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if err := s.walk(v[k], at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		if len(v) > maxPatchListLength {
			name := strings.TrimPrefix(at, ".")
			if name == "" {
				name = "of operations"
			}
			return fmt.Errorf("list %s has %d entries, more than the limit of %d", name, len(v), maxPatchListLength)
		}
		s.listElements += len(v)
		for _, e := range v {
			if err := s.walk(e, at+"[]"); err != nil {
				return err
			}
		}
	}
	return nil
}
