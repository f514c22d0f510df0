package argocd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
	"example.com/simplewebapp-operator/internal/testkit/envop"
)

const timeout = 30 * time.Second

// capture starts a real API server with the operator, drives one
// SimpleWebApp into each state of `captured`, and writes each as the API
// server returns it (without managedFields) to testdata/<name>.yaml.
func capture(t *testing.T) {
	env, err := envop.Start(render.Channels{FS: channels.FS})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	c := env.Client
	ctx := t.Context()
	ns := testkit.Namespace(t, c, testkit.NS{Prefix: "argocd-", Keep: true})
	stable, rapid := testkit.ChannelVersion(t, "stable"), testkit.ChannelVersion(t, "rapid")

	newApp := func(name string, change func(*webappv1.SimpleWebApp)) {
		swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To(int32(2)), Message: "captured for the Argo CD health test"}}
		if change != nil {
			change(swa)
		}
		if err := c.Create(ctx, swa); err != nil {
			t.Fatal(err)
		}
	}
	waitCond := func(name, typ string, status metav1.ConditionStatus, reason string) {
		testkit.WaitFor(t, timeout, fmt.Sprintf("%s: %s=%s %s", name, typ, status, reason), func(ctx context.Context) (bool, string) {
			swa := &webappv1.SimpleWebApp{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
				return false, err.Error()
			}
			cd := meta.FindStatusCondition(swa.Status.Conditions, typ)
			return cd != nil && cd.Status == status && cd.Reason == reason && cd.ObservedGeneration == swa.Generation &&
				swa.Status.ObservedGeneration == swa.Generation, fmt.Sprintf("%+v", swa.Status.Conditions)
		})
	}
	deployment := func(name string) {
		testkit.WaitFor(t, timeout, "Deployment of "+name, func(ctx context.Context) (bool, string) {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-web"}, &appsv1.Deployment{})
			return err == nil, fmt.Sprint(err)
		})
	}
	available := func(name string) {
		deployment(name)
		if err := env.MarkRolledOut(ctx, ns, name+"-web"); err != nil {
			t.Fatal(err)
		}
		waitCond(name, webappv1.ConditionReady, metav1.ConditionTrue, webappv1.ReasonAvailable)
	}
	change := func(name string, f func(*webappv1.SimpleWebApp)) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			swa := &webappv1.SimpleWebApp{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
				return err
			}
			f(swa)
			return c.Update(ctx, swa)
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	newApp("available", nil)
	available("available")

	newApp("progressing", nil)
	deployment("progressing")
	waitCond("progressing", webappv1.ConditionReconciling, metav1.ConditionTrue, webappv1.ReasonProgressing)

	newApp("suspended", nil)
	available("suspended")
	change("suspended", func(s *webappv1.SimpleWebApp) { s.Spec.Suspend = true })
	waitCond("suspended", webappv1.ConditionReady, metav1.ConditionTrue, webappv1.ReasonSuspended)

	newApp("version-not-found", nil)
	available("version-not-found")
	change("version-not-found", func(s *webappv1.SimpleWebApp) { s.Spec.Version = "99.0.0" })
	waitCond("version-not-found", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonVersionNotFound)

	newApp("patch-not-allowed", func(s *webappv1.SimpleWebApp) {
		s.Spec.Patches = []webappv1.Patch{{Target: webappv1.PatchTarget{Kind: "Deployment", Name: "web"},
			Patch: "spec:\n  template:\n    spec:\n      hostNetwork: true\n"}}
	})
	waitCond("patch-not-allowed", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonPatchNotAllowed)

	taken := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "object-not-owned-web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := c.Create(ctx, taken); err != nil {
		t.Fatal(err)
	}
	newApp("object-not-owned", nil)
	waitCond("object-not-owned", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonObjectNotOwned)

	newApp("rollout-failed", nil)
	deployment("rollout-failed")
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rollout-failed-web"}, d); err != nil {
			return err
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
				Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "rollout-failed-web-5d8f" has timed out progressing.`,
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		return c.Status().Update(ctx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitCond("rollout-failed", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonRolloutFailed)

	if stable == rapid {
		t.Fatalf("rolled-back needs two versions: stable and rapid are both %s", stable)
	}
	newApp("rolled-back", func(s *webappv1.SimpleWebApp) {
		s.Spec.Version = stable
		s.Spec.UpgradeTimeout = &metav1.Duration{Duration: 5 * time.Second}
	})
	available("rolled-back")
	change("rolled-back", func(s *webappv1.SimpleWebApp) { s.Spec.Version = rapid })
	waitCond("rolled-back", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonRolledBack)

	for _, f := range captured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(webappv1.GroupVersion.WithKind("SimpleWebApp"))
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: f.name}, u); err != nil {
			t.Fatal(err)
		}
		u.SetManagedFields(nil)
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		head := "# Captured from a real API server with the operator running (go test ./tests/argocd -update).\n"
		if err := os.WriteFile(filepath.Join("testdata", f.name+".yaml"), append([]byte(head), b...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
