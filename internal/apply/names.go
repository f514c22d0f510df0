package apply

import (
	"k8s.io/apimachinery/pkg/api/meta"
	kubectlapply "sigs.k8s.io/kubebuilder-declarative-pattern/applylib/third_party/forked/github.com/kubernetes/kubectl/pkg/cmd/apply"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

// AnnotationAppliedHash records a hash of what the operator last wrote to an
// object. With the live object from the cache it decides, without a request,
// whether the object needs a write (see Applier).
const AnnotationAppliedHash = "simplewebapp.example.com/applied-hash"

// HandoffManager is the field manager of the handoff fields. A separate
// manager lets the operator release them: server-side apply deletes a field
// that its only manager stops applying, but not one that a manager that no
// longer applies still co-owns.
const HandoffManager = render.ManagerName + "-handoff"

// The SimpleWebApp is the parent of a KEP-3659 ApplySet of its objects, as
// kdp's applylib and `kubectl apply --applyset` understand it: its children
// carry LabelApplySetPartOf, and it carries the ApplySet id, tooling and the
// kinds it contains. The operator itself prunes from status.inventory (which a
// tenant cannot edit), not from these annotations; they are for other tools.
const (
	LabelApplySetPartOf = kubectlapply.ApplysetPartOfLabel
	// applySetManager writes the parent's ApplySet labels and annotations: a
	// metadata-only server-side apply that never touches the spec.
	applySetManager = render.ManagerName + "-applyset"
)

// applySetID is the ApplySet id of swa (base64 of a hash of its
// name.namespace.kind.group).
func applySetID(swa *webappv1.SimpleWebApp) string {
	return kubectlapply.NewApplySet(parentRef(swa), kubectlapply.ApplySetTooling{Name: render.ManagerName}, nil).ID()
}

func parentRef(swa *webappv1.SimpleWebApp) *kubectlapply.ApplySetParentRef {
	// The id needs only the kind: a mapping with the GVK will do.
	return &kubectlapply.ApplySetParentRef{Name: swa.Name, Namespace: swa.Namespace,
		RESTMapping: &meta.RESTMapping{GroupVersionKind: webappv1.GroupVersion.WithKind("SimpleWebApp")}}
}
