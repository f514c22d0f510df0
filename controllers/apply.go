package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/applier"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// Applier server-side-applies a render as the ApplySet of its SimpleWebApp
// (KEP-3659) through kdp's ApplySetApplier: one field manager, forced
// ownership of the fields we render, and server-side prune of objects the
// new render no longer contains. Prune lists only the kinds recorded on the
// parent, so no RBAC on */* is needed.
type Applier struct {
	Client     client.Client
	Dynamic    dynamic.Interface
	RESTMapper meta.RESTMapper
	applier    *applier.ApplySetApplier
}

// NewApplier returns an Applier that applies as the ManagerName field manager.
func NewApplier(c client.Client, d dynamic.Interface, m meta.RESTMapper) *Applier {
	return &Applier{Client: c, Dynamic: d, RESTMapper: m, applier: applier.NewApplySetApplier(
		metav1.PatchOptions{FieldManager: ManagerName},
		metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)},
		// No "/version" suffix: kdp writes the tooling annotation verbatim but
		// parses it as name/version when it checks it, so a slash never matches.
		applier.ApplysetOptions{Tooling: ManagerName},
	)}
}

// Apply makes the cluster hold exactly the rendered objects for swa. Each
// object gets a controller reference to swa, so deleting swa
// garbage-collects it and changes to it wake the reconciler.
//
// Handoff fields are applied by HandoffManager before the ApplySet, so the
// field always has an owner while ManagerName lets go of it. An object that
// does not exist yet is created by the ApplySet with its handoff fields (no
// transient default, such as a Deployment starting with 1 pod), and
// HandoffManager then takes co-ownership with the same values.
func (a *Applier) Apply(ctx context.Context, swa *webappv1.SimpleWebApp, r *Rendered) error {
	objs := r.Objects
	var later []*unstructured.Unstructured
	for _, h := range r.Handoffs {
		err := a.applyHandoff(ctx, h)
		if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) { // not created yet
			later = append(later, h)
			objs = withFields(objs, h)
			continue
		}
		if err != nil {
			return err
		}
	}
	if err := a.applySet(ctx, swa, objs); err != nil {
		return err
	}
	for _, h := range later {
		if err := a.applyHandoff(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// withFields returns objs with the object that partial names replaced by a
// copy that also holds partial's fields.
func withFields(objs []*unstructured.Unstructured, partial *unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	copy(out, objs)
	for i, o := range out {
		if o.GetName() == partial.GetName() && o.GroupVersionKind() == partial.GroupVersionKind() {
			merged := o.DeepCopy()
			merge(merged.Object, partial.DeepCopy().Object)
			out[i] = merged
		}
	}
	return out
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

func (a *Applier) applyHandoff(ctx context.Context, partial *unstructured.Unstructured) error {
	mapping, err := a.RESTMapper.RESTMapping(partial.GroupVersionKind().GroupKind(), partial.GroupVersionKind().Version)
	if err != nil {
		return err
	}
	body, err := partial.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = a.Dynamic.Resource(mapping.Resource).Namespace(partial.GetNamespace()).Patch(ctx, partial.GetName(),
		types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: HandoffManager, Force: ptr.To(true)})
	if err != nil {
		return fmt.Errorf("applying %s %s as %s: %w", partial.GetKind(), partial.GetName(), HandoffManager, err)
	}
	return nil
}

func (a *Applier) applySet(ctx context.Context, swa *webappv1.SimpleWebApp, objs []*unstructured.Unstructured) error {
	gvk := webappv1.GroupVersion.WithKind("SimpleWebApp")
	owner := metav1.NewControllerRef(swa, gvk)
	items := make([]*manifest.Object, 0, len(objs))
	for _, u := range objs {
		u = u.DeepCopy()
		u.SetOwnerReferences([]metav1.OwnerReference{*owner})
		obj, err := manifest.NewObject(u)
		if err != nil {
			return err
		}
		items = append(items, obj)
	}
	// The ApplySet parent needs its kind; objects from a typed client carry none.
	parentObj := swa.DeepCopy()
	parentObj.SetGroupVersionKind(gvk)
	parent, err := applier.NewParentRef(a.RESTMapper, parentObj, gvk, swa.Name, swa.Namespace)
	if err != nil {
		return fmt.Errorf("mapping SimpleWebApp: %w", err)
	}
	return a.applier.Apply(ctx, applier.ApplierOptions{
		Objects:       items,
		RESTMapper:    a.RESTMapper,
		Namespace:     swa.Namespace,
		Prune:         true,
		Force:         true, // take back fields that someone edited by hand (drift)
		ParentRef:     parent,
		Client:        a.Client,
		DynamicClient: a.Dynamic,
	})
}
