package render

import (
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsjson "sigs.k8s.io/json"
)

// decodeStrict reads o into a typed object the way the API server reads a
// request with strict field validation: field names match case-sensitively,
// and a field the typed object does not know is an error naming its path. A
// lenient decoding would drop such a field here while a newer API server
// stores it, so the floor would pass what it never saw.
func decodeStrict(o *unstructured.Unstructured, into any) error {
	b, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(b, into)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// deployment is o as a typed Deployment (nil for other kinds), decoded once
// per object of this floor check.
func (in *floorInput) deployment(o *unstructured.Unstructured) (*appsv1.Deployment, error) {
	if o == nil || o.GroupVersionKind() != appsv1.SchemeGroupVersion.WithKind("Deployment") {
		return nil, nil
	}
	if d, ok := in.decoded[o]; ok {
		return d.dep, d.err
	}
	d := &appsv1.Deployment{}
	err := decodeStrict(o, d)
	if err != nil {
		d = nil
	}
	if in.decoded == nil {
		in.decoded = map[*unstructured.Unstructured]decodedDeployment{}
	}
	in.decoded[o] = decodedDeployment{d, err}
	return d, err
}

type decodedDeployment struct {
	dep *appsv1.Deployment
	err error
}

// podTemplate returns the pod template of a workload, if o has one.
func (in *floorInput) podTemplate(o *unstructured.Unstructured) (*corev1.PodTemplateSpec, error) {
	d, err := in.deployment(o)
	if err != nil || d == nil {
		return nil, err
	}
	return &d.Spec.Template, nil
}

// basePodTemplate is the pod template of o in the package's own render, or
// nil.
func (in *floorInput) basePodTemplate(o *unstructured.Unstructured) *corev1.PodTemplateSpec {
	t, _ := in.podTemplate(in.base[Identity(o)])
	return t
}

// fieldsAreKnown: every field of every object is one the operator's
// k8s.io/api types know, so the rules after this one read all of it, as the
// API server will store it.
func fieldsAreKnown(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	var err error
	if o.GroupVersionKind() == appsv1.SchemeGroupVersion.WithKind("Deployment") {
		_, err = in.deployment(o)
	} else if k, ok := LookupKind(o.GroupVersionKind()); ok {
		err = decodeStrict(o, k.New())
	}
	if err != nil {
		return "known fields", fmt.Sprintf("%v (the operator's Kubernetes API types do not know it, so the floor cannot check it)", err), true
	}
	return "", "", false
}
