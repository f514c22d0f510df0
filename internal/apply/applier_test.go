package apply

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// contains decides, without a request, whether a live object (from the
// cache, with defaults and status) still holds everything the operator
// wrote.
func TestContains(t *testing.T) {
	live := map[string]any{
		"spec": map[string]any{"replicas": int64(3), "strategy": map[string]any{"type": "RollingUpdate"},
			"ports": []any{map[string]any{"port": int64(80), "protocol": "TCP"}}},
		"status": map[string]any{"ready": int64(3)},
	}
	for _, tc := range []struct {
		name string
		want any
		ok   bool
	}{
		{"subset", map[string]any{"spec": map[string]any{"replicas": int64(3)}}, true},
		{"number types differ", map[string]any{"spec": map[string]any{"replicas": float64(3)}}, true},
		{"list element subset", map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}}, true},
		{"value differs", map[string]any{"spec": map[string]any{"replicas": int64(4)}}, false},
		{"missing field", map[string]any{"spec": map[string]any{"paused": true}}, false},
		{"list length differs", map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}, map[string]any{"port": int64(81)}}}}, false},
		{"empty map wanted, none live", map[string]any{"metadata": map[string]any{}}, true},
	} {
		if got := contains(live, tc.want); got != tc.ok {
			t.Errorf("%s: contains = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// A write that changed only a Deployment's metadata bumps its generation
// but rolls nothing: its status still holds when the Deployment controller
// had observed the previous generation, and only then.
func TestObservedIfMetadataOnly(t *testing.T) {
	dep := func(gen, observed int64, replicas int32, image string) *appsv1.Deployment {
		d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &replicas}}
		d.Name, d.Generation = "x-web", gen
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: replicas,
			AvailableReplicas: replicas, ReadyReplicas: replicas}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "web", Image: image}}
		return d
	}
	for _, tc := range []struct {
		name            string
		before, written *appsv1.Deployment
		observed        int64
	}{
		{"an annotation added: still observed", dep(1, 1, 2, "a"), dep(2, 1, 2, "a"), 2},
		{"the template changed: the controller must observe it", dep(1, 1, 2, "a"), dep(2, 1, 2, "b"), 1},
		{"replicas changed: the controller must observe it", dep(1, 1, 2, "a"), dep(2, 1, 3, "a"), 1},
		{"not observed before the write: still not", dep(2, 1, 2, "a"), dep(3, 1, 2, "a"), 1},
	} {
		observedIfMetadataOnly(tc.before, tc.written)
		if got := tc.written.Status.ObservedGeneration; got != tc.observed {
			t.Errorf("%s: observedGeneration %d, want %d", tc.name, got, tc.observed)
		}
	}
}
