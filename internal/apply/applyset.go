package apply

import (
	"context"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubectlapply "sigs.k8s.io/kubebuilder-declarative-pattern/applylib/third_party/forked/github.com/kubernetes/kubectl/pkg/cmd/apply"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
	"example.com/simplewebapp-operator/internal/version"
)

// EnsureParent writes swa's ApplySet labels and annotations when they differ
// from what the inventory needs, with a metadata-only apply: the spec (and
// so the generation) is never written. It returns the SimpleWebApp as the
// server holds it after the write, or nil when nothing was written; swa is
// only read (the children are written at the same time).
func (a *Applier) EnsureParent(ctx context.Context, swa *webappv1.SimpleWebApp, inventory []webappv1.ObjectReference) (*unstructured.Unstructured, error) {
	gvk := webappv1.GroupVersion.WithKind("SimpleWebApp")
	parentMapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	ref := parentRef(swa)
	ref.RESTMapping = parentMapping
	set := kubectlapply.NewApplySet(ref, kubectlapply.ApplySetTooling{Name: render.ManagerName, Version: "v" + version.Operator}, a.Mapper)
	for _, item := range inventory {
		kind, ok := render.LookupGroupKind(item.Group, item.Kind)
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
		return nil, step.ObjectError(err, "SimpleWebApp", swa.Name, "ApplySet metadata apply")
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
