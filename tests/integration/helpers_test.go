package integration

import (
	"context"
	"fmt"
	"io/fs"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

const timeout = 30 * time.Second

// The versions of the "testing" channel, which exist only in testChannels:
// pruneWith is the stable version plus a ConfigMap "extra", pruneWithout the
// stable version as it is.
var pruneWith, pruneWithout = testkit.NewVersion(testkit.Main, 0), testkit.NewVersion(testkit.Main, 1)

// testChannels is the embedded tree plus the channel "testing", listing
// pruneWith and pruneWithout.
func testChannels() fs.FS {
	m := testkit.Embedded(testkit.Main)
	tree := testkit.MapTree(m)
	stable := testkit.ChannelVersion(testkit.Main, "stable")
	testkit.CopyPackage(testkit.Main, tree, stable, pruneWith, testkit.AddResource("extra.yaml",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  only-in: "+pruneWith+"\n"))
	testkit.CopyPackage(testkit.Main, tree, stable, pruneWithout)
	testkit.WriteChannel(testkit.Main, tree, "testing", pruneWith, pruneWithout)
	return m
}

func newWebApp(ns, name string, replicas int32, message string) *webappv1.SimpleWebApp {
	return &webappv1.SimpleWebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       webappv1.SimpleWebAppSpec{Replicas: ptr.To(replicas), Message: message},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, ns, name string, obj client.Object) error {
	t.Helper()
	return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
}

// update re-reads the SimpleWebApp, changes it and writes it back.
func update(t *testing.T, ns, name string, change func(*webappv1.SimpleWebApp)) *webappv1.SimpleWebApp {
	t.Helper()
	swa := &webappv1.SimpleWebApp{}
	for range 10 {
		if err := get(t, ns, name, swa); err != nil {
			t.Fatal(err)
		}
		change(swa)
		err := k8s.Update(context.Background(), swa)
		if err == nil {
			return swa
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("could not update after 10 conflicts")
	return nil
}

// deployment waits for the Deployment of the SimpleWebApp to satisfy cond.
func deployment(t *testing.T, ns, swa, what string, cond func(*appsv1.Deployment) (bool, string)) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	testkit.WaitFor(t, timeout, what, func(context.Context) (bool, string) {
		if err := get(t, ns, swa+"-web", d); err != nil {
			return false, err.Error()
		}
		return cond(d)
	})
	return d
}

// service waits for the Service of SimpleWebApp swa. It is created in the
// same wave as the Deployment, and after it when the API server's cluster-IP
// allocator is busy: seeing the Deployment does not mean it exists yet.
func service(t *testing.T, ns, swa string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	testkit.WaitFor(t, timeout, "Service "+swa+"-web", func(context.Context) (bool, string) {
		err := get(t, ns, swa+"-web", svc)
		return err == nil, fmt.Sprint(err)
	})
	return svc
}

// condition returns the condition of the stored SimpleWebApp.
func condition(t *testing.T, ns, name, typ string) (*webappv1.SimpleWebApp, *metav1.Condition) {
	t.Helper()
	swa := &webappv1.SimpleWebApp{}
	if err := get(t, ns, name, swa); err != nil {
		t.Fatal(err)
	}
	return swa, meta.FindStatusCondition(swa.Status.Conditions, typ)
}

// waitCondition waits until the SimpleWebApp's condition typ has status and reason.
func waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) *webappv1.SimpleWebApp {
	t.Helper()
	var swa *webappv1.SimpleWebApp
	testkit.WaitFor(t, timeout, fmt.Sprintf("%s=%s (%s) on %s", typ, status, reason, name), func(context.Context) (bool, string) {
		var c *metav1.Condition
		swa, c = condition(t, ns, name, typ)
		if c == nil {
			return false, fmt.Sprintf("no %s condition: %+v", typ, swa.Status)
		}
		return c.Status == status && c.Reason == reason && c.ObservedGeneration == swa.Generation, fmt.Sprintf("%+v", *c)
	})
	return swa
}

// markRolledOut plays the Deployment controller (absent in envtest): it
// reports every desired pod of the current generation updated and ready.
// It re-reads the Deployment on conflict: the operator may write it meanwhile.
func markRolledOut(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := get(t, d.Namespace, d.Name, d); err != nil {
			return err
		}
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		}
		return k8s.Status().Update(context.Background(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, seen := testkit.DeploymentRolledOut(d); !ok {
		t.Fatalf("marked rolled out, but: %s", seen)
	}
}

// contentConfigMap is the ConfigMap holding the message that d's pods mount.
func contentConfigMap(t *testing.T, d *appsv1.Deployment) *corev1.ConfigMap {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "content" && v.ConfigMap != nil {
			cm := &corev1.ConfigMap{}
			if err := get(t, d.Namespace, v.ConfigMap.Name, cm); err != nil {
				t.Fatalf("ConfigMap %s mounted by %s: %v", v.ConfigMap.Name, d.Name, err)
			}
			return cm
		}
	}
	t.Fatalf("Deployment %s mounts no content ConfigMap", d.Name)
	return nil
}

// subresourceBody sends obj as the body of a subresource update.
func subresourceBody(obj client.Object) client.SubResourceUpdateOption {
	return client.WithSubResourceBody(obj)
}

// rolledOutAndReady plays the Deployment controller for the SimpleWebApp's
// Deployment as it is now and waits until the SimpleWebApp says Ready.
func rolledOutAndReady(t *testing.T, ns, name string) *webappv1.SimpleWebApp {
	t.Helper()
	markRolledOut(t, deployment(t, ns, name, "Deployment of "+name, func(*appsv1.Deployment) (bool, string) { return true, "" }))
	return waitCondition(t, ns, name, webappv1.ConditionReady, metav1.ConditionTrue, "Available")
}
