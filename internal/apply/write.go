package apply

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

// create POSTs desired with its handoff fields: it fails if the name is taken,
// so nothing is adopted. The create's entry owns the handoff fields until the
// first apply that changes the object takes them over for HandoffManager
// (takeOverPatch): one write per new object, where a handoff apply right
// after the create was a second, sequential one.
func (a *Applier) create(ctx context.Context, swa *webappv1.SimpleWebApp, key Key, desired, partial *unstructured.Unstructured, res *Result) (client.Object, error) {
	gvk := desired.GroupVersionKind()
	kind, _ := render.LookupKind(gvk)
	body := desired
	if partial != nil {
		body = render.Merge(desired, partial)
	}
	out, err := a.post(ctx, kind, body)
	if apierrors.IsAlreadyExists(err) {
		existing := kind.New()
		if err := a.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
			return nil, step.ObjectError(err, gvk.Kind, desired.GetName(), "read")
		}
		if metav1.IsControlledBy(existing, swa) {
			return nil, step.ErrStaleRead // ours; the cache has not seen it yet
		}
		return nil, step.Stalled(webappv1.ReasonObjectNotOwned, "%s %s exists and is not controlled by this SimpleWebApp; it is left untouched (delete or rename it, or rename the SimpleWebApp)", gvk.Kind, desired.GetName())
	}
	if err != nil {
		return nil, step.ObjectError(err, gvk.Kind, desired.GetName(), "create")
	}
	res.Writes++
	a.Writes.Record(key, out)
	return out, nil
}

// post creates body as render.ManagerName. A body that converts to its Go type
// exactly goes through the typed client, as protobuf: the API server decodes
// and encodes it for a fraction of the CPU that JSON costs it (and the
// operator decodes the answer once, where JSON came back as a map to
// convert). A body with fields this build's types do not know (a package
// for a newer Kubernetes) goes as JSON, whole.
func (a *Applier) post(ctx context.Context, kind render.ManagedKind, body *unstructured.Unstructured) (client.Object, error) {
	typed := kind.New()
	if runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(body.Object, typed, true) == nil {
		if err := a.Client.Create(ctx, typed, client.FieldOwner(render.ManagerName)); err != nil {
			return nil, err
		}
		return typed, nil
	}
	gvk := body.GroupVersionKind()
	mapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	out, err := a.Dynamic.Resource(mapping.Resource).Namespace(body.GetNamespace()).Create(ctx, body, metav1.CreateOptions{FieldManager: render.ManagerName})
	if err != nil {
		return nil, err
	}
	return fromUnstructured(out, kind)
}

// apply server-side-applies obj as manager, forcing conflicts (hand edits are
// reverted), with uid as a precondition: a different object of the same name
// is never written.
func (a *Applier) apply(ctx context.Context, ri dynamic.ResourceInterface, obj *unstructured.Unstructured, uid types.UID, manager string) (*unstructured.Unstructured, error) {
	body := obj.DeepCopy()
	body.SetUID(uid)
	raw, err := body.MarshalJSON()
	if err != nil {
		return nil, err
	}
	out, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, raw, metav1.PatchOptions{FieldManager: manager, Force: ptr.To(true)})
	if err != nil {
		return nil, step.ObjectError(err, obj.GetKind(), obj.GetName(), "apply")
	}
	return out, nil
}
