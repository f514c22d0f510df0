package objcache

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
)

// The cache keeps which foreign managers own what outside status: not the
// operator's own entries, nor those of subresources.
func TestTrimManagedFields(t *testing.T) {
	raw := metav1.NewFieldsV1(`{"f:spec":{}}`)
	sidecar := metav1.NewFieldsV1(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{}}}}}`)
	d := &appsv1.Deployment{}
	d.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: render.ManagerName, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: raw},
		{Manager: render.ManagerName, Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: raw},
		{Manager: apply.HandoffManager, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: raw},
		{Manager: "kube-controller-manager", Subresource: "status", FieldsV1: raw},
		{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: sidecar},
		{Manager: "kubectl-rollout", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: raw},
	}
	out, _ := trimManagedFields(d)
	got := out.(*appsv1.Deployment).ManagedFields
	// The foreign one without sensitive fields keeps only its presence; the
	// sidecar's manager keeps its fields (a take-over reads them); our
	// entries and the status manager are gone.
	if len(got) != 2 || got[0].Manager != "kubectl-edit" || got[0].FieldsV1 == nil || got[1].Manager != "kubectl-rollout" || got[1].FieldsV1 != nil {
		t.Errorf("kept %+v", got)
	}
	if fields := apply.ForeignSensitiveFields(got); len(fields) != 1 {
		t.Errorf("sensitive fields after the trim: %v, want the sidecar's manager", fields)
	}
}
