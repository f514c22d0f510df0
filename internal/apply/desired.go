package apply

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

// DesiredObjects are the objects of r as the operator writes them for swa,
// each with its handoff fields when they are applied (`kubectl swa diff`
// dry-runs exactly these).
func DesiredObjects(swa *webappv1.SimpleWebApp, r *render.Rendered) []*unstructured.Unstructured {
	id := applySetID(swa)
	out := make([]*unstructured.Unstructured, 0, len(r.Objects))
	for _, o := range r.Objects {
		d := desired(swa, o, id)
		if h := r.Handoff(o); h != nil {
			d = render.Merge(d, h)
		}
		out = append(out, d)
	}
	return out
}

// desired is o as the operator writes it: owned by swa (a controller
// reference, so the garbage collector removes it with swa), labelled as a
// member of swa's ApplySet, and with the hash of all that.
func desired(swa *webappv1.SimpleWebApp, o *unstructured.Unstructured, applySet string) *unstructured.Unstructured {
	d := o.DeepCopy()
	d.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(swa, webappv1.GroupVersion.WithKind("SimpleWebApp"))})
	labels := d.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelApplySetPartOf] = applySet
	d.SetLabels(labels)
	ann := d.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationAppliedHash] = hashOf(d.Object)
	d.SetAnnotations(ann)
	return d
}

func hashOf(v any) string {
	b, _ := json.Marshal(v) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
