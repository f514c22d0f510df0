package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// Apply makes the cluster hold exactly objs for swa. Each object gets a
// controller reference to swa, so deleting swa garbage-collects it and
// changes to it wake the reconciler.
func (a *Applier) Apply(ctx context.Context, swa *webappv1.SimpleWebApp, objs []*unstructured.Unstructured) error {
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
