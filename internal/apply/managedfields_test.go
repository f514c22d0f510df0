package apply

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/simplewebapp-operator/internal/render"
)

// Foreign managers are taken over only for fields that matter.
func TestForeignSensitiveFields(t *testing.T) {
	entry := func(manager, sub, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Subresource: sub, FieldsV1: metav1.NewFieldsV1(fields)}
	}
	for _, tc := range []struct {
		name string
		e    metav1.ManagedFieldsEntry
		want int
	}{
		{"a sidecar", entry("kubectl-edit", "", `{"f:spec":{"f:template":{"f:spec":{"f:containers":{}}}}}`), 1},
		{"externalIPs", entry("kubectl-edit", "", `{"f:spec":{"f:externalIPs":{}}}`), 1},
		{"rollout restart", entry("kubectl-rollout", "", `{"f:spec":{"f:template":{"f:metadata":{"f:annotations":{}}}}}`), 0},
		{"revision annotation", entry("kube-controller-manager", "", `{"f:metadata":{"f:annotations":{}}}`), 0},
		{"hand scaling", entry("kubectl-scale", "", `{"f:spec":{"f:replicas":{}}}`), 0},
		{"the autoscaler", entry("kube-controller-manager", "scale", `{"f:spec":{"f:replicas":{}}}`), 0},
		{"ours", entry(render.ManagerName, "", `{"f:spec":{"f:template":{"f:spec":{}}}}`), 0},
	} {
		if got := ForeignSensitiveFields([]metav1.ManagedFieldsEntry{tc.e}); len(got) != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}
