package testkit

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
)

// DeploymentRolledOut reports whether d is rolled out: the Deployment
// controller has observed its newest generation, and every desired pod
// (spec.replicas, default 1) is updated, ready and available, with no old pod
// left. This is what the operator's Ready=True promises. Otherwise it says
// what it saw.
func DeploymentRolledOut(d *appsv1.Deployment) (bool, string) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	done := s.ObservedGeneration == d.Generation && s.Replicas == want &&
		s.UpdatedReplicas == want && s.ReadyReplicas == want && s.AvailableReplicas == want
	return done, fmt.Sprintf("Deployment %s generation %d observed %d, spec.replicas %d: replicas %d updated %d ready %d available %d",
		d.Name, d.Generation, s.ObservedGeneration, want, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas)
}

// ReplicasOwners lists the field managers (manager/operation[/subresource])
// whose managed fields include d's spec.replicas.
func ReplicasOwners(d *appsv1.Deployment) []string {
	var out []string
	for _, f := range d.ManagedFields {
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if f.FieldsV1 == nil || json.Unmarshal(f.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		if _, ok := fields.Spec["f:replicas"]; ok {
			o := f.Manager + "/" + string(f.Operation)
			if f.Subresource != "" {
				o += "/" + f.Subresource
			}
			out = append(out, o)
		}
	}
	return out
}
