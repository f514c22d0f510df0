package integration

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/internal/testkit"
)

// A deleted child is re-created and a hand-edited one is put back, without
// waiting for a resync: the operator watches what it owns.
func TestDriftIsCorrected(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "drift", 3, "steady"))
	d := deployment(t, ns, "drift", "Deployment created", func(d *appsv1.Deployment) (bool, string) { return true, "" })

	svc := service(t, ns, "drift")
	if err := k8s.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, timeout, "deleted Service re-created", func(context.Context) (bool, string) {
		again := &corev1.Service{}
		if err := get(t, ns, "drift-web", again); err != nil {
			return false, err.Error()
		}
		return again.UID != svc.UID, "same UID"
	})

	// Someone scales the Deployment by hand (another field manager).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := get(t, ns, "drift-web", d); err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To[int32](7)
		return k8s.Update(context.Background(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
	deployment(t, ns, "drift", "hand-edited replicas put back to 3", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 3, fmt.Sprint(*d.Spec.Replicas)
	})

	if err := k8s.Delete(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	deployment(t, ns, "drift", "deleted Deployment re-created", func(again *appsv1.Deployment) (bool, string) {
		return again.UID != d.UID, "same UID"
	})
}
