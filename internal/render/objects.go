package render

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Identity is group/kind namespace/name of an object.
func Identity(o *unstructured.Unstructured) string {
	gvk := o.GroupVersionKind()
	return fmt.Sprintf("%s/%s %s/%s", gvk.Group, gvk.Kind, o.GetNamespace(), o.GetName())
}

// identities lists the identities of the objects, sorted.
func identities(objs []*unstructured.Unstructured) []string {
	ids := make([]string, 0, len(objs))
	for _, o := range objs {
		ids = append(ids, Identity(o))
	}
	sort.Strings(ids)
	return ids
}

// Merge returns a copy of obj that also holds partial's fields (an object
// with its handoff fields, as it runs).
func Merge(obj, partial *unstructured.Unstructured) *unstructured.Unstructured {
	merged := obj.DeepCopy()
	merge(merged.Object, partial.DeepCopy().Object)
	return merged
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}
