package apply

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
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
	for _, c := range pruneCandidates(inventory, keep) {
		ref, kind := c.ref, c.kind
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
			return fail(step.ObjectError(err, ref.Kind, ref.Name, "delete"))
		}
		a.Writes.Forget(Key{ref.Group, ref.Kind, swa.Namespace, ref.Name})
		pruned = append(pruned, ref)
	}
	return remaining, pruned, nil
}

// pruneCandidate is an inventory entry to delete, and its kind.
type pruneCandidate struct {
	ref  webappv1.ObjectReference
	kind render.ManagedKind
}

// pruneCandidates are the entries of inventory that keep does not hold, of
// kinds the operator manages (an entry of a kind it no longer manages is
// nothing it may delete: it is dropped from the inventory), in inventory
// order.
func pruneCandidates(inventory, keep []webappv1.ObjectReference) []pruneCandidate {
	var out []pruneCandidate
	for _, ref := range inventory {
		if slices.Contains(keep, ref) {
			continue
		}
		if kind, ok := render.LookupGroupKind(ref.Group, ref.Kind); ok {
			out = append(out, pruneCandidate{ref, kind})
		}
	}
	return out
}
