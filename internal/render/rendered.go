package render

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Labels the render puts on every object. The instance label is part of the
// selectors, so two SimpleWebApps in one namespace never share pods.
const (
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagerName    = "simplewebapp-operator"
)

// Rendered is what the operator applies for one SimpleWebApp.
type Rendered struct {
	// Objects are applied by ManagerName.
	Objects []*unstructured.Unstructured
	// Handoffs are partial objects with the fields that the package hands
	// off under a condition which is false now: applied as HandoffManager.
	Handoffs []*unstructured.Unstructured
	// HandoffFields are the dot paths of each object's handoff fields (by
	// identity), handed off or not: a take-over of field managers gives
	// them to HandoffManager rather than drop them (takeOverPatch).
	HandoffFields map[string][]string
}

// WithHandoff is o with its handoff fields from r, if any.
func (r *Rendered) WithHandoff(o *unstructured.Unstructured) *unstructured.Unstructured {
	for _, h := range r.Handoffs {
		if Identity(h) == Identity(o) {
			return Merge(o, h)
		}
	}
	return o
}

// Handoff is the partial object of o's handoff fields to apply, or nil.
func (r *Rendered) Handoff(o *unstructured.Unstructured) *unstructured.Unstructured {
	for _, h := range r.Handoffs {
		if Identity(h) == Identity(o) {
			return h
		}
	}
	return nil
}
