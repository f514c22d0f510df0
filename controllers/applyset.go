package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubectlapply "sigs.k8s.io/kubebuilder-declarative-pattern/applylib/third_party/forked/github.com/kubernetes/kubectl/pkg/cmd/apply"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// The SimpleWebApp is the parent of a KEP-3659 ApplySet of its objects, as
// kdp's applylib and `kubectl apply --applyset` understand it: its children
// carry LabelApplySetPartOf, and it carries the ApplySet id, tooling and the
// kinds it contains. The operator itself prunes from status.inventory (which a
// tenant cannot edit), not from these annotations; they are for other tools.
const (
	LabelApplySetPartOf = kubectlapply.ApplysetPartOfLabel
	// applySetManager writes the parent's ApplySet labels and annotations: a
	// metadata-only server-side apply that never touches the spec.
	applySetManager = ManagerName + "-applyset"
)

// applySetID is the ApplySet id of swa (base64 of a hash of its
// name.namespace.kind.group).
func applySetID(swa *webappv1.SimpleWebApp) string {
	return kubectlapply.NewApplySet(parentRef(swa), kubectlapply.ApplySetTooling{Name: ManagerName}, nil).ID()
}

func parentRef(swa *webappv1.SimpleWebApp) *kubectlapply.ApplySetParentRef {
	// The id needs only the kind: a mapping with the GVK will do.
	return &kubectlapply.ApplySetParentRef{Name: swa.Name, Namespace: swa.Namespace,
		RESTMapping: &meta.RESTMapping{GroupVersionKind: webappv1.GroupVersion.WithKind("SimpleWebApp")}}
}

// ensureParent writes swa's ApplySet labels and annotations when they differ
// from what the inventory needs, with a metadata-only apply: the spec (and
// so the generation) is never written. It returns the SimpleWebApp as the
// server holds it after the write, or nil when nothing was written; swa is
// only read (the children are written at the same time).
func (a *Applier) ensureParent(ctx context.Context, swa *webappv1.SimpleWebApp, inventory []webappv1.ObjectReference) (*unstructured.Unstructured, error) {
	gvk := webappv1.GroupVersion.WithKind("SimpleWebApp")
	parentMapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	ref := parentRef(swa)
	ref.RESTMapping = parentMapping
	set := kubectlapply.NewApplySet(ref, kubectlapply.ApplySetTooling{Name: ManagerName, Version: "v" + OperatorVersion}, a.Mapper)
	for _, item := range inventory {
		kind, ok := managedGroupKind(item.Group, item.Kind)
		if !ok {
			continue
		}
		m, err := a.Mapper.RESTMapping(kind.GVK.GroupKind(), kind.GVK.Version)
		if err != nil {
			return nil, err
		}
		set.AddResource(m, swa.Namespace)
	}
	want := set.BuildParentPatch(kubectlapply.ApplySetUpdateMode("latest"))
	if subsetOf(want.Labels, swa.Labels) && subsetOf(want.Annotations, swa.Annotations) {
		return nil, nil
	}
	body, err := json.Marshal(want)
	if err != nil {
		return nil, err
	}
	out, err := a.Dynamic.Resource(parentMapping.Resource).Namespace(swa.Namespace).Patch(ctx, swa.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: applySetManager, Force: ptr.To(true)})
	if err != nil {
		return nil, objectError(err, "SimpleWebApp", swa.Name, "ApplySet metadata apply")
	}
	return out, nil
}

func subsetOf(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// describeRef names an inventory entry in messages.
func describeRef(r webappv1.ObjectReference) string {
	return fmt.Sprintf("%s/%s", r.Kind, r.Name)
}
