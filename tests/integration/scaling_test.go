package integration

import (
	"context"
	"fmt"
	"k8s.io/client-go/util/retry"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/tests/kit"
)

// `kubectl scale swa` works: the scale subresource maps to spec.replicas, and
// reports the pods and their selector, so an HPA can target a SimpleWebApp.
func TestScaleSubresource(t *testing.T) {
	ns := kit.Namespace(t, k8s, testNS)
	swa := newWebApp(ns, "scaled", 2, "scale me")
	create(t, swa)
	rolledOutAndReady(t, ns, "scaled")

	scale := &autoscalingv1.Scale{}
	if err := k8s.SubResource("scale").Get(context.Background(), swa, scale); err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 2 || scale.Status.Replicas != 2 || scale.Status.Selector == "" {
		t.Fatalf("scale of the SimpleWebApp: %+v", scale)
	}
	updateScale(t, swa, 4)
	deployment(t, ns, "scaled", "Deployment scaled to 4 through the SimpleWebApp's /scale", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 4, fmt.Sprint(*d.Spec.Replicas)
	})
}

// With spec.autoscaling the HPA owns the pod count: a count it sets survives
// reconciles that apply everything else; switching autoscaling off hands the
// count back to spec.replicas.
func TestAutoscalerOwnsReplicas(t *testing.T) {
	ns := kit.Namespace(t, k8s, testNS)
	swa := newWebApp(ns, "auto", 3, "m0")
	swa.Spec.Autoscaling = &webappv1.Autoscaling{MinReplicas: 2, MaxReplicas: 10}
	create(t, swa)
	d := deployment(t, ns, "auto", "Deployment", func(*appsv1.Deployment) (bool, string) { return true, "" })
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	kit.WaitFor(t, timeout, "HorizontalPodAutoscaler auto-web", func(context.Context) (bool, string) {
		err := get(t, ns, "auto-web", hpa)
		return err == nil, fmt.Sprint(err)
	})
	if hpa.Spec.ScaleTargetRef.Name != "auto-web" || *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 10 {
		t.Errorf("HPA spec %+v", hpa.Spec)
	}
	if managedBy(d, "simplewebapp-operator-handoff", "") {
		t.Error("spec.replicas applied although autoscaling is on")
	}

	// The HPA's decision, made the way it makes it: through /scale.
	scaleDeployment(t, d, 7)
	for i := 1; i <= 3; i++ {
		msg := fmt.Sprintf("m%d", i)
		update(t, ns, "auto", func(s *webappv1.SimpleWebApp) { s.Spec.Message = msg })
		d = deployment(t, ns, "auto", "reconcile applying message "+msg, func(d *appsv1.Deployment) (bool, string) {
			return contentConfigMap(t, d).Data["message"] == msg, "old message"
		})
		if *d.Spec.Replicas != 7 {
			t.Fatalf("reconcile %d reverted the autoscaler's 7 replicas to %d", i, *d.Spec.Replicas)
		}
	}

	update(t, ns, "auto", func(s *webappv1.SimpleWebApp) { s.Spec.Autoscaling = nil })
	deployment(t, ns, "auto", "replicas handed back to spec.replicas (3)", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 3, fmt.Sprint(*d.Spec.Replicas)
	})
	// Pruned once the Deployment is rolled out at the handed-back count.
	rolledOutAndReady(t, ns, "auto")
	kit.WaitFor(t, timeout, "HPA pruned", func(context.Context) (bool, string) {
		err := get(t, ns, "auto-web", &autoscalingv2.HorizontalPodAutoscaler{})
		return err != nil, "still there"
	})
}

// Autoscaling switched on for a running app, in the same update as a new
// message: the apply that rolls the message no longer holds spec.replicas
// (the HPA is to own them), and the replicas the app ran with stay until the
// HPA changes them: no fall to the default of 1 (the Deployment's create
// owned them; the apply's take-over hands them to the handoff manager).
func TestAutoscalingSwitchedOnKeepsReplicas(t *testing.T) {
	ns := kit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "later", 3, "m0"))
	deployment(t, ns, "later", "Deployment with 3 replicas", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 3, fmt.Sprint(*d.Spec.Replicas)
	})
	for i, autoscaling := range []*webappv1.Autoscaling{{MinReplicas: 2, MaxReplicas: 10}, nil} {
		msg := fmt.Sprintf("m%d", i+1)
		update(t, ns, "later", func(s *webappv1.SimpleWebApp) {
			s.Spec.Message = msg
			s.Spec.Autoscaling = autoscaling
		})
		d := deployment(t, ns, "later", "reconcile applying message "+msg, func(d *appsv1.Deployment) (bool, string) {
			return contentConfigMap(t, d).Data["message"] == msg, "old message"
		})
		if *d.Spec.Replicas != 3 {
			t.Errorf("after message %s (autoscaling %v): %d replicas, want 3", msg, autoscaling != nil, *d.Spec.Replicas)
		}
		if !managedBy(d, "simplewebapp-operator-handoff", metav1.ManagedFieldsOperationApply) {
			t.Errorf("after message %s: spec.replicas not held by the handoff manager: %+v", msg, d.GetManagedFields())
		}
	}
}

func scaleDeployment(t *testing.T, d *appsv1.Deployment, n int32) {
	t.Helper()
	updateScale(t, d, n)
}

// updateScale sets replicas through obj's /scale as an HPA does: read, set,
// write, and read again on a conflict (the operator writes the same objects).
func updateScale(t *testing.T, obj client.Object, n int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale := &autoscalingv1.Scale{}
		if err := k8s.SubResource("scale").Get(context.Background(), obj, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = n
		return k8s.SubResource("scale").Update(context.Background(), obj, subresourceBody(scale))
	})
	if err != nil {
		t.Fatal(err)
	}
}
