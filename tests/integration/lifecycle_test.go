package integration

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// Create → every rendered object exists, owned by the SimpleWebApp and
// applied by the operator's field manager; status reports what was applied.
func TestCreateAppliesOwnedObjects(t *testing.T) {
	ns := newNamespace(t)
	swa := newWebApp(ns, "my-webapp", 3, "Welcome to my awesome web app!")
	create(t, swa)

	d := deployment(t, ns, "my-webapp", "Deployment with 3 replicas", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 3, fmt.Sprint(*d.Spec.Replicas)
	})
	cm := contentConfigMap(t, d)
	if cm.Data["message"] != "Welcome to my awesome web app!" {
		t.Errorf("content ConfigMap holds %q", cm.Data["message"])
	}
	svc := &corev1.Service{}
	if err := get(t, ns, "my-webapp-web", svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Ports[0].Port != 80 {
		t.Errorf("Service port %d, want 80", svc.Spec.Ports[0].Port)
	}

	if err := get(t, ns, "my-webapp", swa); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{d, cm, svc} {
		refs := obj.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != swa.UID || !ptr.Deref(refs[0].Controller, false) {
			t.Errorf("%T %s: owner references %+v, want a controller reference to %s", obj, obj.GetName(), refs, swa.UID)
		}
		if !appliedBy(obj, "simplewebapp-operator") {
			t.Errorf("%T %s: not applied by field manager simplewebapp-operator: %+v", obj, obj.GetName(), obj.GetManagedFields())
		}
	}

	// No controller-manager here: status waits for the Deployment to roll out.
	waitCondition(t, ns, "my-webapp", webappv1.ConditionReconciling, metav1.ConditionTrue, "Progressing")
	markRolledOut(t, d)
	swa = waitCondition(t, ns, "my-webapp", webappv1.ConditionReady, metav1.ConditionTrue, "Available")
	st := swa.Status
	if st.ObservedGeneration != swa.Generation || st.Version != "1.0.0" || st.Channel != "stable" ||
		st.ReadyReplicas != 3 || len(st.Inventory) != 4 || st.Selector == "" {
		t.Errorf("status after roll-out: %+v", st)
	}
}

// Scaling changes only the replica count; a new message rolls the pods by
// pointing the pod template at a new, content-named ConfigMap.
func TestScaleAndMessageChange(t *testing.T) {
	ns := newNamespace(t)
	create(t, newWebApp(ns, "my-webapp", 3, "Welcome to my awesome web app!"))
	before := deployment(t, ns, "my-webapp", "Deployment created", func(d *appsv1.Deployment) (bool, string) { return true, "" })
	oldContent := contentConfigMap(t, before).Name

	update(t, ns, "my-webapp", func(s *webappv1.SimpleWebApp) { s.Spec.Replicas = ptr.To[int32](4) })
	scaled := deployment(t, ns, "my-webapp", "4 replicas", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 4, fmt.Sprint(*d.Spec.Replicas)
	})
	if contentConfigMap(t, scaled).Name != oldContent {
		t.Error("scaling changed the pod template")
	}

	update(t, ns, "my-webapp", func(s *webappv1.SimpleWebApp) {
		s.Spec.Replicas = ptr.To[int32](5)
		s.Spec.Message = "Hello, updated message!"
	})
	rolled := deployment(t, ns, "my-webapp", "5 replicas and a new message", func(d *appsv1.Deployment) (bool, string) {
		cm := d.Spec.Template.Spec.Volumes[0].ConfigMap
		return *d.Spec.Replicas == 5 && cm != nil && cm.Name != oldContent, fmt.Sprint(d.Spec.Template.Spec.Volumes)
	})
	if got := contentConfigMap(t, rolled).Data["message"]; got != "Hello, updated message!" {
		t.Errorf("new ConfigMap holds %q", got)
	}
	// The old message's ConfigMap is pruned: it is no longer rendered.
	eventually(t, timeout, "old content ConfigMap pruned", func() (bool, string) {
		err := get(t, ns, oldContent, &corev1.ConfigMap{})
		return err != nil, fmt.Sprint(err)
	})
}

func appliedBy(obj client.Object, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}
