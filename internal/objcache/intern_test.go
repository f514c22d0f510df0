package objcache

import (
	"strings"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/simplewebapp-operator/internal/apply"
)

// Two children decoded apart share the strings that repeat across a fleet
// after the cache's transform, and keep their own where they differ.
func TestTrimInternsRepeatedStrings(t *testing.T) {
	// Built from pieces, as a decoder allocates each string anew.
	fresh := func(s string) string { return strings.Clone(s) }
	child := func(instance string) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Labels = map[string]string{fresh("app.kubernetes.io/name"): fresh("simplewebapp"), fresh("app.kubernetes.io/instance"): fresh(instance)}
		d.Annotations = map[string]string{fresh(apply.AnnotationAppliedHash): fresh(instance + "-hash")}
		d.OwnerReferences = []metav1.OwnerReference{{APIVersion: fresh("example.com/v1"), Kind: fresh("SimpleWebApp"), Name: fresh(instance)}}
		d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: fresh("kubectl-rollout"), Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: fresh("apps/v1")}}
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{fresh("app.kubernetes.io/name"): fresh("simplewebapp")}}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: fresh("web"), Image: fresh("nginx:1.27")}}
		return d
	}
	a, b := child("one"), child("two")
	for _, d := range []*appsv1.Deployment{a, b} {
		if _, err := trimManagedFields(d); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q are not one string", what, x, y)
		}
	}
	key := func(m map[string]string, want string) string {
		for k := range m {
			if k == want {
				return k
			}
		}
		t.Fatalf("no key %q in %v", want, m)
		return ""
	}
	same("label key", key(a.Labels, "app.kubernetes.io/name"), key(b.Labels, "app.kubernetes.io/name"))
	same("label value", a.Labels["app.kubernetes.io/name"], b.Labels["app.kubernetes.io/name"])
	same("annotation key", key(a.Annotations, apply.AnnotationAppliedHash), key(b.Annotations, apply.AnnotationAppliedHash))
	same("owner kind", a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind)
	same("manager", a.ManagedFields[0].Manager, b.ManagedFields[0].Manager)
	same("selector value", a.Spec.Selector.MatchLabels["app.kubernetes.io/name"], b.Spec.Selector.MatchLabels["app.kubernetes.io/name"])
	same("image", a.Spec.Template.Spec.Containers[0].Image, b.Spec.Template.Spec.Containers[0].Image)
	if a.Labels["app.kubernetes.io/instance"] != "one" || b.Labels["app.kubernetes.io/instance"] != "two" ||
		a.Annotations[apply.AnnotationAppliedHash] != "one-hash" || b.OwnerReferences[0].Name != "two" {
		t.Errorf("values changed: %v %v %v %v", a.Labels, b.Labels, a.Annotations, b.OwnerReferences)
	}
}

// A file that a package ships to every app is held once by the cache; a
// short value (an app's own message) stays its own copy.
func TestTrimInternsLongConfigMapValues(t *testing.T) {
	conf := strings.Repeat("server { listen 8080; }\n", 20) // about 0.5 KiB
	cm := func(message string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{"default.conf": strings.Clone(conf), "message": strings.Clone(message)}}
	}
	a, b := cm("hello"), cm("hello")
	for _, c := range []*corev1.ConfigMap{a, b} {
		if _, err := trimManagedFields(c); err != nil {
			t.Fatal(err)
		}
	}
	if a.Data["default.conf"] != conf || unsafe.StringData(a.Data["default.conf"]) != unsafe.StringData(b.Data["default.conf"]) {
		t.Error("the shared configuration file is not one string")
	}
	if a.Data["message"] != "hello" || unsafe.StringData(a.Data["message"]) == unsafe.StringData(b.Data["message"]) {
		t.Errorf("short values: %q, interned %v (want their own copies)", a.Data["message"], unsafe.StringData(a.Data["message"]) == unsafe.StringData(b.Data["message"]))
	}
}
