package controllers

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// rollout reads a Deployment the way `kubectl rollout status` does: done when
// the controller has observed the latest spec and every desired pod is
// updated and available, with no old pods left.
func rollout(d *appsv1.Deployment) (done, failed bool, msg string) {
	if d == nil {
		return false, false, "waiting for the Deployment to be created"
	}
	desired := desiredReplicas(d)
	s := d.Status
	if s.ObservedGeneration < d.Generation {
		return false, false, fmt.Sprintf("waiting for the Deployment controller to observe generation %d", d.Generation)
	}
	for _, c := range s.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return false, true, fmt.Sprintf("Deployment %s exceeded its progress deadline: %s", d.Name, c.Message)
		}
	}
	switch {
	case s.UpdatedReplicas < desired:
		return false, false, fmt.Sprintf("%d of %d pods updated", s.UpdatedReplicas, desired)
	case s.Replicas > s.UpdatedReplicas:
		return false, false, fmt.Sprintf("%d old pods are terminating", s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < desired:
		return false, false, fmt.Sprintf("%d of %d pods available", s.AvailableReplicas, desired)
	}
	return true, false, fmt.Sprintf("%d of %d pods ready", s.ReadyReplicas, desired)
}

func desiredReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas != nil {
		return *d.Spec.Replicas
	}
	return 1
}

// inventoryOf lists the objects as status.inventory entries.
func inventoryOf(objs []*unstructured.Unstructured) []webappv1.ObjectReference {
	refs := make([]webappv1.ObjectReference, 0, len(objs))
	for _, o := range objs {
		refs = append(refs, webappv1.ObjectReference{Group: o.GroupVersionKind().Group, Kind: o.GetKind(), Name: o.GetName()})
	}
	return refs
}

// workloadName is the Deployment among the objects, or "" if there is none.
func workloadName(refs []webappv1.ObjectReference) string {
	for _, r := range refs {
		if r.Group == "apps" && r.Kind == "Deployment" {
			return r.Name
		}
	}
	return ""
}

// awaitingObservation: the Deployment's controller has not yet observed its
// latest generation, as for a moment after every write that bumps it.
func awaitingObservation(d *appsv1.Deployment) bool {
	return d != nil && d.Status.ObservedGeneration < d.Generation
}
