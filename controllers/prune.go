package controllers

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// Prune deletes the objects of the inventory that the render no longer holds
// (keep), and returns the inventory that remains. The reconciler calls it
// only once the applied version is Ready, so a message change keeps the old
// ConfigMaps (which old pods still mount) until the new pods are available,
// and a slow or failed roll-out can still restart an old pod.
//
// The scope is status.inventory, what the operator recorded applying: never a
// list by labels or annotations, which a tenant could edit. An object is
// deleted only if the cache shows it controlled by swa, with its UID as a
// precondition.
func (a *Applier) Prune(ctx context.Context, swa *webappv1.SimpleWebApp, inventory, keep []webappv1.ObjectReference) ([]webappv1.ObjectReference, []webappv1.ObjectReference, error) {
	remaining := slices.Clone(keep)
	var pruned []webappv1.ObjectReference
	// On an error everything not pruned yet stays in the inventory.
	fail := func(err error) ([]webappv1.ObjectReference, []webappv1.ObjectReference, error) {
		rest := slices.Clone(keep)
		for _, ref := range inventory {
			if !slices.Contains(rest, ref) && !slices.Contains(pruned, ref) {
				rest = append(rest, ref)
			}
		}
		return rest, pruned, err
	}
	for _, ref := range inventory {
		if slices.Contains(keep, ref) {
			continue
		}
		kind, ok := managedGroupKind(ref.Group, ref.Kind)
		if !ok {
			continue // not a kind the operator manages any more: nothing it may delete
		}
		live := kind.New()
		err := a.Client.Get(ctx, types.NamespacedName{Namespace: swa.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) {
			continue // gone already
		}
		if err != nil {
			return fail(err)
		}
		if !metav1.IsControlledBy(live, swa) {
			continue // not ours: drop it from the inventory, leave it alone
		}
		mapping, err := a.Mapper.RESTMapping(kind.GVK.GroupKind(), kind.GVK.Version)
		if err != nil {
			return fail(err)
		}
		err = a.Dynamic.Resource(mapping.Resource).Namespace(swa.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{
			Preconditions:     &metav1.Preconditions{UID: ptr.To(live.GetUID())},
			PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fail(objectError(err, ref.Kind, ref.Name, "delete"))
		}
		a.Forget(ref.Group, ref.Kind, swa.Namespace, ref.Name)
		pruned = append(pruned, ref)
	}
	return remaining, pruned, nil
}
