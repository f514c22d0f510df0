package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// Create → every rendered object exists, owned by the SimpleWebApp and
// written by the operator's field manager (created with a POST, which fails
// on a taken name instead of adopting); status reports what was applied.
func TestCreateAppliesOwnedObjects(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	swa := newWebApp(ns, "my-webapp", 3, "Welcome to my awesome web app!")
	create(t, swa)

	d := deployment(t, ns, "my-webapp", "Deployment with 3 replicas", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 3, fmt.Sprint(*d.Spec.Replicas)
	})
	cm := contentConfigMap(t, d)
	if cm.Data["message"] != "Welcome to my awesome web app!" {
		t.Errorf("content ConfigMap holds %q", cm.Data["message"])
	}
	svc := service(t, ns, "my-webapp")
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
		if !managedBy(obj, "simplewebapp-operator", "") {
			t.Errorf("%T %s: not written by field manager simplewebapp-operator: %+v", obj, obj.GetName(), obj.GetManagedFields())
		}
	}

	// No controller-manager here: status waits for the Deployment to roll out.
	waitCondition(t, ns, "my-webapp", webappv1.ConditionReconciling, metav1.ConditionTrue, "Progressing")
	markRolledOut(t, d)
	swa = waitCondition(t, ns, "my-webapp", webappv1.ConditionReady, metav1.ConditionTrue, "Available")
	st := swa.Status
	if st.ObservedGeneration != swa.Generation || st.AppliedGeneration != swa.Generation || st.Version != testkit.ChannelVersion(t, "stable") || st.Channel != "stable" ||
		st.ReadyReplicas != 3 || st.Selector == "" {
		t.Errorf("status after roll-out: %+v, want the stable channel's version %s", st, testkit.ChannelVersion(t, "stable"))
	}
	checkInventory(t, swa)
}

// checkInventory checks that status.inventory names exactly the objects the
// SimpleWebApp controls: each listed object exists with a controller
// reference to it, and each object of a kind the packages render that it
// controls is listed.
func checkInventory(t *testing.T, swa *webappv1.SimpleWebApp) {
	t.Helper()
	listed := map[string]bool{}
	for _, ref := range swa.Status.Inventory {
		mapping, err := k8s.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.Group, Kind: ref.Kind})
		if err != nil {
			t.Errorf("status.inventory %+v: %v", ref, err)
			continue
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(mapping.GroupVersionKind)
		if err := get(t, swa.Namespace, ref.Name, obj); err != nil {
			t.Errorf("status.inventory %+v: %v", ref, err)
			continue
		}
		if !metav1.IsControlledBy(obj, swa) {
			t.Errorf("status.inventory %+v: not controlled by the SimpleWebApp: %+v", ref, obj.GetOwnerReferences())
		}
		listed[ref.Kind+"/"+ref.Name] = true
	}
	var controlled []string
	for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
		&corev1.ServiceAccountList{}, &policyv1.PodDisruptionBudgetList{}, &autoscalingv2.HorizontalPodAutoscalerList{}} {
		if err := k8s.List(context.Background(), list, client.InNamespace(swa.Namespace)); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range items {
			obj := item.(client.Object)
			if !metav1.IsControlledBy(obj, swa) {
				continue
			}
			gvk, err := apiutil.GVKForObject(obj, scheme)
			if err != nil {
				t.Fatal(err)
			}
			controlled = append(controlled, gvk.Kind+"/"+obj.GetName())
		}
	}
	for _, c := range controlled {
		if !listed[c] {
			t.Errorf("%s is controlled by the SimpleWebApp but not in status.inventory %+v", c, swa.Status.Inventory)
		}
	}
	if len(controlled) != len(swa.Status.Inventory) || len(controlled) == 0 {
		t.Errorf("status.inventory lists %d objects, the SimpleWebApp controls %v", len(swa.Status.Inventory), controlled)
	}
}

// Scaling changes only the replica count; a new message rolls the pods by
// pointing the pod template at a new, content-named ConfigMap.
func TestScaleAndMessageChange(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
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
	// A change of the Deployment is a server-side apply.
	if !managedBy(rolled, "simplewebapp-operator", metav1.ManagedFieldsOperationApply) {
		t.Errorf("after a change the Deployment has no apply entry of the operator: %+v", rolled.GetManagedFields())
	}

	// Prune after health: the old message's ConfigMap, which old pods still
	// mount, stays while the roll-out is under way...
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		half := &appsv1.Deployment{}
		if err := get(t, ns, rolled.Name, half); err != nil {
			return err
		}
		half.Status = appsv1.DeploymentStatus{ObservedGeneration: half.Generation, Replicas: 7, UpdatedReplicas: 2, ReadyReplicas: 5, AvailableReplicas: 5}
		return k8s.Status().Update(context.Background(), half)
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.HoldsFor(t, 2*time.Second, "old content ConfigMap kept during the roll-out", func(context.Context) (bool, string) {
		err := get(t, ns, oldContent, &corev1.ConfigMap{})
		return err == nil, fmt.Sprint(err)
	})
	// ...and is pruned once updatedReplicas == availableReplicas == replicas.
	markRolledOut(t, rolled)
	testkit.WaitFor(t, timeout, "old content ConfigMap pruned after the roll-out", func(context.Context) (bool, string) {
		err := get(t, ns, oldContent, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// managedBy reports whether manager has a managed-fields entry (of the given
// operation, or any when empty) outside subresources.
func managedBy(obj client.Object, manager string, op metav1.ManagedFieldsOperationType) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Subresource == "" && (op == "" || f.Operation == op) {
			return true
		}
	}
	return false
}
