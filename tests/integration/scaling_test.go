package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// `kubectl scale swa` works: the scale subresource maps to spec.replicas, and
// reports the pods and their selector, so an HPA can target a SimpleWebApp.
func TestScaleSubresource(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
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
	ns := testkit.Namespace(t, k8s, testNS)
	swa := newWebApp(ns, "auto", 3, "m0")
	swa.Spec.Autoscaling = &webappv1.Autoscaling{MinReplicas: 2, MaxReplicas: 10}
	create(t, swa)
	d := deployment(t, ns, "auto", "Deployment", func(*appsv1.Deployment) (bool, string) { return true, "" })
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	testkit.WaitFor(t, timeout, "HorizontalPodAutoscaler auto-web", func(context.Context) (bool, string) {
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
	testkit.WaitFor(t, timeout, "HPA pruned", func(context.Context) (bool, string) {
		err := get(t, ns, "auto-web", &autoscalingv2.HorizontalPodAutoscaler{})
		return err != nil, "still there"
	})
}

// Autoscaling switched on for a running app, in the same update as a new
// message: the apply that rolls the message no longer holds spec.replicas
// (the HPA is to own them), and the replicas the app ran with stay until the
// HPA changes them: no fall to the default of 1 (the Deployment's create
// owned them; the apply's take-over hands them to the handoff manager).
// Switched off again, the handoff manager applies spec.replicas itself.
//
// Every version of the Deployment is watched from before the first update:
// none may have fewer replicas, whoever owns them. The take-over is the
// second write of the pass that applies the message, so the state to wait
// for is both: the new message and spec.replicas held by the handoff manager.
func TestAutoscalingSwitchedOnKeepsReplicas(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "later", 3, "m0"))
	d := deployment(t, ns, "later", "Deployment with 3 replicas", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 3, fmt.Sprint(*d.Spec.Replicas)
	})
	history := watchReplicas(t, ns, d)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the Deployment's versions after the create:\n%s", versionsString(history()))
		}
	})
	for i, autoscaling := range []*webappv1.Autoscaling{{MinReplicas: 2, MaxReplicas: 10}, nil} {
		msg := fmt.Sprintf("m%d", i+1)
		update(t, ns, "later", func(s *webappv1.SimpleWebApp) {
			s.Spec.Message = msg
			s.Spec.Autoscaling = autoscaling
		})
		deployment(t, ns, "later", "message "+msg+" applied and spec.replicas held by the handoff manager", func(d *appsv1.Deployment) (bool, string) {
			owners := testkit.ReplicasOwners(d)
			done := contentConfigMap(t, d).Data["message"] == msg && slices.Contains(owners, "simplewebapp-operator-handoff/Apply")
			return done, fmt.Sprintf("replicas %d owned by %v", *d.Spec.Replicas, owners)
		})
	}
	seen := history()
	for _, v := range seen {
		if v.replicas != 3 {
			t.Errorf("a version of the Deployment had %d replicas, want 3 throughout:\n%s", v.replicas, versionsString(seen))
			break
		}
	}
	if !t.Failed() {
		t.Logf("the Deployment's versions after the create:\n%s", versionsString(seen))
	}
}

// replicasVersion is one version of a Deployment: its replicas and the
// managers (manager/operation) owning spec.replicas.
type replicasVersion struct {
	resourceVersion string
	replicas        int32
	owners          []string
}

func versionsString(vs []replicasVersion) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "  rv %s: replicas %d owned by %v\n", v.resourceVersion, v.replicas, v.owners)
	}
	return b.String()
}

// watchReplicas records every version of d from the one given; the returned
// function stops the watch and returns them.
func watchReplicas(t *testing.T, ns string, d *appsv1.Deployment) func() []replicasVersion {
	t.Helper()
	cs, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.AppsV1().Deployments(ns).Watch(t.Context(), metav1.ListOptions{
		FieldSelector: "metadata.name=" + d.Name, ResourceVersion: d.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := []replicasVersion{{d.ResourceVersion, *d.Spec.Replicas, testkit.ReplicasOwners(d)}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if v, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type == watch.Modified {
				mu.Lock()
				seen = append(seen, replicasVersion{v.ResourceVersion, ptr.Deref(v.Spec.Replicas, 1), testkit.ReplicasOwners(v)})
				mu.Unlock()
			}
		}
	}()
	return func() []replicasVersion {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
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
