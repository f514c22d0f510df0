package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NS describes a namespace for Namespace.
type NS struct {
	// Name is the namespace's name; when empty, the API server generates one
	// from Prefix (default "test-").
	Name, Prefix string
	// PodSecurity, when set ("restricted", "baseline", "privileged"), labels
	// the namespace to enforce, audit and warn about that Pod Security level.
	PodSecurity string
	// WaitForServiceAccount waits until the namespace's default
	// ServiceAccount exists: without it no pod is admitted. It needs a
	// controller-manager (not in envtest).
	WaitForServiceAccount bool
	// Keep leaves the namespace when the test ends; by default it is deleted
	// then (without waiting), so later tests have less to reconcile.
	Keep bool
}

// Namespace creates a namespace for one test and returns its name.
func Namespace(t testing.TB, c client.Client, spec NS) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spec.Name}}
	if spec.Name == "" {
		ns.GenerateName = spec.Prefix
		if ns.GenerateName == "" {
			ns.GenerateName = "test-"
		}
	}
	if spec.PodSecurity != "" {
		ns.Labels = map[string]string{}
		for _, mode := range []string{"enforce", "audit", "warn"} {
			ns.Labels["pod-security.kubernetes.io/"+mode] = spec.PodSecurity
		}
	}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace %s%s: %v", spec.Name, spec.Prefix, err)
	}
	if !spec.Keep {
		t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	}
	if spec.WaitForServiceAccount {
		WaitFor(t, time.Minute, "default ServiceAccount in "+ns.Name, func(ctx context.Context) (bool, string) {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
			return err == nil, fmt.Sprint(err)
		})
	}
	return ns.Name
}
