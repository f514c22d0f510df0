package apply

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/render"
)

// contains reports whether every field of want has the same value in live
// (live may hold more: defaults, status). Lists must have the same elements
// in the same order. Numbers compare by value.
func contains(live, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return len(w) == 0 && live == nil
		}
		for k, wv := range w {
			if !contains(l[k], wv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok {
			return len(w) == 0 && live == nil
		}
		if len(l) != len(w) {
			return false
		}
		for i := range w {
			if !contains(l[i], w[i]) {
				return false
			}
		}
		return true
	case nil:
		return true
	}
	if lf, ok := number(live); ok {
		if wf, ok := number(want); ok {
			return lf == wf
		}
	}
	return reflect.DeepEqual(live, want)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func toUnstructured(o client.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func fromUnstructured(u *unstructured.Unstructured, kind render.ManagedKind) (client.Object, error) {
	if u == nil {
		return nil, nil
	}
	o := kind.New()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o); err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return o, nil
}
