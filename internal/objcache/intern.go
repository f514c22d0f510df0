package objcache

import (
	"unique"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The cache holds thousands of children whose metadata repeats a few
// strings: label and annotation keys, the common label values, field
// managers, owner API versions and kinds, the image. Each decoded object
// has its own copies of them (a large part of a child's metadata); interned,
// they share one. Only strings that are few across a fleet are
// interned: an interned string that is used once costs more than its copy.

// internedLabelValues are the label keys whose values repeat across
// SimpleWebApps (not instance or part-of, which name one).
var internedLabelValues = map[string]bool{
	"app.kubernetes.io/name":       true,
	"app.kubernetes.io/component":  true,
	"app.kubernetes.io/managed-by": true,
	"app.kubernetes.io/version":    true,
}

func intern(s string) string { return unique.Make(s).Value() }

// internedDataSize is the size from which a ConfigMap's values are
// interned: files a package ships to every app (the web server's
// configuration) are then held once; a long value that is
// one app's own costs the interning's few dozen bytes more than its copy.
const internedDataSize = 256

// internMeta interns o's repeated metadata strings; for a Deployment those
// of its selector and pod template labels and its images, for a ConfigMap
// its long values.
func internMeta(o client.Object) {
	o.SetLabels(internMap(o.GetLabels()))
	o.SetAnnotations(internMap(o.GetAnnotations()))
	refs := o.GetOwnerReferences()
	for i := range refs {
		refs[i].APIVersion, refs[i].Kind = intern(refs[i].APIVersion), intern(refs[i].Kind)
	}
	entries := o.GetManagedFields()
	for i := range entries {
		e := &entries[i]
		e.Manager, e.Operation = intern(e.Manager), metav1.ManagedFieldsOperationType(intern(string(e.Operation)))
		e.APIVersion, e.FieldsType, e.Subresource = intern(e.APIVersion), intern(e.FieldsType), intern(e.Subresource)
	}
	if d, ok := o.(*appsv1.Deployment); ok {
		if d.Spec.Selector != nil {
			d.Spec.Selector.MatchLabels = internMap(d.Spec.Selector.MatchLabels)
		}
		d.Spec.Template.Labels = internMap(d.Spec.Template.Labels)
		for i := range d.Spec.Template.Spec.Containers {
			c := &d.Spec.Template.Spec.Containers[i]
			c.Name, c.Image = intern(c.Name), intern(c.Image)
		}
	}
	if cm, ok := o.(*corev1.ConfigMap); ok {
		for k, v := range cm.Data {
			if len(v) >= internedDataSize {
				cm.Data[k] = intern(v)
			}
		}
	}
}

// internMap interns a label or annotation map's keys, and the values of
// the keys in internedLabelValues.
func internMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if internedLabelValues[k] {
			v = intern(v)
		}
		out[intern(k)] = v
	}
	return out
}
