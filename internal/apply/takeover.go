package apply

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

// takeOver merges the entries of foreign managers that own sensitive fields,
// and the operator's own Update entry, into its Apply entry, on obj as the
// last apply returned it. The patch carries obj's resourceVersion, so a
// concurrent write makes it conflict rather than lose an entry. Such a write
// is usual: a new pod template makes the Deployment controller write the
// Deployment within milliseconds of the apply. On a conflict the object is
// read again (uncached: the cache keeps no field sets of ours) and the merge
// redone from what it holds now, a few times, before the pass gives up as a
// stale read. It returns the managers taken over, for an event.
//
// The handoff fields (handoffPaths) among what is merged go to HandoffManager
// instead: the operator's apply never holds them, so its next apply would
// remove them (a Deployment's replicas would fall to the default of 1),
// while HandoffManager keeps them until it applies them again or an
// autoscaler takes them.
func (a *Applier) takeOver(ctx context.Context, ri dynamic.ResourceInterface, obj *unstructured.Unstructured, handoffPaths []string) ([]string, error) {
	name := obj.GetName()
	var taken []string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		patch, t, err := takeOverPatch(obj, handoffPaths)
		if err != nil {
			return err
		}
		taken = t
		_, err = ri.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: render.ManagerName})
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh, gerr := ri.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		obj = fresh
		return err
	})
	if err != nil {
		return nil, step.ObjectError(err, obj.GetKind(), name, "take-over of field managers")
	}
	return taken, nil
}
