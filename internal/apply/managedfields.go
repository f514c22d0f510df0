package apply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"example.com/simplewebapp-operator/internal/render"
)

// Server-side apply leaves other field managers' fields alone: a container, a
// volume or hostNetwork that someone added with kubectl edit survives every
// forced apply of ours. Like Flux's ssa package, the operator takes such a
// manager's fields over (merges its managed-fields entry into its own apply
// entry); its next apply then removes every field it owns but does not
// render. Only managers owning fields that matter for security or exposure
// are taken over, so `kubectl rollout restart` (a pod template annotation),
// the Deployment controller's revision annotation and an autoscaler's
// replicas (the scale subresource) are left alone.

// ourManagers are the field managers of this operator.
var ourManagers = []string{render.ManagerName, HandoffManager, applySetManager}

// ForeignSensitiveFields lists, per foreign manager, the fields it owns
// under spec (but spec.replicas and the pod template's metadata).
func ForeignSensitiveFields(entries []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, e := range entries {
		if !IsForeign(e) || e.FieldsV1 == nil {
			continue
		}
		if fields := SensitiveFields(e.FieldsV1.GetRawBytes()); len(fields) > 0 {
			out = append(out, fmt.Sprintf("%s (%s)", e.Manager, strings.Join(fields, ", ")))
		}
	}
	return out
}

// IsForeign says whether the entry is another field manager's, outside subresources.
func IsForeign(e metav1.ManagedFieldsEntry) bool {
	return e.Subresource == "" && !slices.Contains(ourManagers, e.Manager)
}

// SensitiveFields names the fields under spec in a FieldsV1 document, except
// spec.replicas and spec.template.metadata.
func SensitiveFields(raw []byte) []string {
	var fields map[string]any
	if json.Unmarshal(raw, &fields) != nil {
		return nil
	}
	spec, _ := fields["f:spec"].(map[string]any)
	var out []string
	for k, v := range spec {
		switch k {
		case ".", "f:replicas":
		case "f:template":
			t, _ := v.(map[string]any)
			for k2 := range t {
				if k2 != "." && k2 != "f:metadata" {
					out = append(out, "spec.template."+strings.TrimPrefix(k2, "f:"))
				}
			}
		default:
			out = append(out, "spec."+strings.TrimPrefix(k, "f:"))
		}
	}
	sort.Strings(out)
	return out
}

// leftover reports whether, after an apply, fields remain that the
// operator's apply entry does not own but should: sensitive fields of a
// foreign manager, or fields of the operator's own create (a POST records
// them under an Update entry) that the render no longer holds. Apply removes
// only fields of its own entry.
func leftover(entries []metav1.ManagedFieldsEntry) bool {
	if len(ForeignSensitiveFields(entries)) > 0 {
		return true
	}
	var applied, created *fieldpath.Set
	for _, e := range entries {
		if e.Manager != render.ManagerName || e.Subresource != "" || e.FieldsV1 == nil {
			continue
		}
		s := fieldpath.NewSet()
		if s.FromJSON(bytes.NewReader(e.FieldsV1.GetRawBytes())) != nil {
			continue
		}
		switch e.Operation {
		case metav1.ManagedFieldsOperationApply:
			applied = s
		case metav1.ManagedFieldsOperationUpdate:
			created = s
		}
	}
	if created == nil {
		return false
	}
	if applied == nil {
		return !created.Empty()
	}
	return !created.Difference(applied).Empty()
}

// takeOverPatch is the merge patch that replaces obj's managed fields by
// the merged ones, with obj's resourceVersion as a precondition, and the
// foreign managers it takes over.
func takeOverPatch(obj *unstructured.Unstructured, handoffPaths []string) ([]byte, []string, error) {
	merged, handedOff := fieldpath.NewSet(), fieldpath.NewSet()
	var keep []metav1.ManagedFieldsEntry
	var taken []string
	var ours, handoff *metav1.ManagedFieldsEntry
	for _, e := range obj.GetManagedFields() {
		absorb := false
		switch {
		case e.Manager == HandoffManager && e.Subresource == "" && e.Operation == metav1.ManagedFieldsOperationApply:
			handoff = &e
			absorb = true
		case e.Manager == render.ManagerName && e.Subresource == "" && e.Operation == metav1.ManagedFieldsOperationApply:
			ours = &e
			absorb = true
		case e.Manager == render.ManagerName && e.Subresource == "" && e.Operation == metav1.ManagedFieldsOperationUpdate:
			absorb = true
		case IsForeign(e) && e.FieldsV1 != nil && len(SensitiveFields(e.FieldsV1.GetRawBytes())) > 0:
			absorb = true
			taken = append(taken, fmt.Sprintf("%s (%s)", e.Manager, strings.Join(SensitiveFields(e.FieldsV1.GetRawBytes()), ", ")))
		}
		if !absorb {
			keep = append(keep, e)
			continue
		}
		if e.FieldsV1 != nil {
			s := fieldpath.NewSet()
			if err := s.FromJSON(bytes.NewReader(e.FieldsV1.GetRawBytes())); err != nil {
				return nil, nil, fmt.Errorf("managed fields of %s: %w", e.Manager, err)
			}
			if e.Manager == HandoffManager {
				handedOff = handedOff.Union(s)
			} else {
				merged = merged.Union(s)
			}
		}
	}
	merged, moved := splitPaths(merged, handoffPaths)
	handedOff = handedOff.Union(moved)
	entry, err := appliedEntry(render.ManagerName, merged, ours, obj.GetAPIVersion())
	if err != nil {
		return nil, nil, err
	}
	keep = append(keep, entry)
	if !handedOff.Empty() {
		entry, err := appliedEntry(HandoffManager, handedOff, handoff, obj.GetAPIVersion())
		if err != nil {
			return nil, nil, err
		}
		keep = append(keep, entry)
	}
	// A merge patch replaces a list whole; with resourceVersion set, the API
	// server answers 409 Conflict when the object changed since obj.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": obj.GetResourceVersion(),
		"managedFields":   keep,
	}})
	return patch, taken, err
}

// appliedEntry is manager's Apply entry owning fields; it keeps the API
// version and time of the entry it replaces, if any.
func appliedEntry(manager string, fields *fieldpath.Set, old *metav1.ManagedFieldsEntry, apiVersion string) (metav1.ManagedFieldsEntry, error) {
	raw, err := fields.ToJSON()
	if err != nil {
		return metav1.ManagedFieldsEntry{}, err
	}
	e := metav1.ManagedFieldsEntry{
		Manager: manager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: apiVersion,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(raw)),
	}
	if old != nil {
		e.APIVersion, e.Time = old.APIVersion, old.Time
	}
	return e, nil
}

// splitPaths splits fields into those outside and those at or under any of
// the dot paths.
func splitPaths(fields *fieldpath.Set, dotPaths []string) (rest, under *fieldpath.Set) {
	if len(dotPaths) == 0 {
		return fields, fieldpath.NewSet()
	}
	prefixes := make([]fieldpath.Path, 0, len(dotPaths))
	for _, p := range dotPaths {
		var path fieldpath.Path
		for _, name := range strings.Split(p, ".") {
			path = append(path, fieldpath.PathElement{FieldName: &name})
		}
		prefixes = append(prefixes, path)
	}
	rest, under = fieldpath.NewSet(), fieldpath.NewSet()
	fields.Iterate(func(p fieldpath.Path) {
		for _, prefix := range prefixes {
			if len(p) >= len(prefix) && p[:len(prefix)].Equals(prefix) {
				under.Insert(p.Copy())
				return
			}
		}
		rest.Insert(p.Copy())
	})
	return rest, under
}
