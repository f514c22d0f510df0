package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

// kstatusOf is what Flux's health checks and kstatus-based waiters conclude
// from the stored SimpleWebApp.
func kstatusOf(t *testing.T, ns, name string) (kstatus.Status, string) {
	t.Helper()
	swa := &webappv1.SimpleWebApp{}
	if err := get(t, ns, name, swa); err != nil {
		t.Fatal(err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(swa)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("SimpleWebApp")
	res, err := kstatus.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status, res.Message
}

func waitKstatus(t *testing.T, ns, name string, want kstatus.Status) {
	t.Helper()
	testkit.WaitFor(t, timeout, fmt.Sprintf("kstatus %s", want), func(context.Context) (bool, string) {
		got, msg := kstatusOf(t, ns, name)
		return got == want, string(got) + ": " + msg
	})
}

// The stored object reads as GitOps tools need: InProgress while rolling
// out, Current when Available, Failed at once when a new generation cannot
// be applied (not InProgress until a timeout), and Current again after a fix.
// The operator never writes the spec: metadata.generation stays 1 after the
// first reconciles.
func TestKstatusFollowsTheApp(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "gitops", 2, "hello"))
	d := deployment(t, ns, "gitops", "Deployment", func(*appsv1.Deployment) (bool, string) { return true, "" })
	waitKstatus(t, ns, "gitops", kstatus.InProgressStatus)
	markRolledOut(t, d)
	waitKstatus(t, ns, "gitops", kstatus.CurrentStatus)
	stored := webApp(ns, "gitops", nil)
	if err := get(t, ns, "gitops", stored); err != nil {
		t.Fatal(err)
	}
	storedTimeout, _, _ := unstructured.NestedString(stored.Object, "spec", "upgradeTimeout")
	if stored.GetGeneration() != 1 || storedTimeout != "5m" || stored.GetLabels()["applyset.kubernetes.io/id"] == "" {
		t.Errorf("generation %d (want 1: the operator never writes the spec), spec.upgradeTimeout %q (want the default as stored, 5m), ApplySet id %q",
			stored.GetGeneration(), storedTimeout, stored.GetLabels()["applyset.kubernetes.io/id"])
	}

	t0 := time.Now()
	update(t, ns, "gitops", func(s *webappv1.SimpleWebApp) { s.Spec.Version = "7.7.7" })
	waitKstatus(t, ns, "gitops", kstatus.FailedStatus)
	t.Logf("Failed %s after the bad generation", time.Since(t0).Round(time.Millisecond))

	update(t, ns, "gitops", func(s *webappv1.SimpleWebApp) { s.Spec.Version = "" })
	waitKstatus(t, ns, "gitops", kstatus.CurrentStatus)
}

// spec.suspend stops every write: a hand edit survives while suspended (and
// status says Suspended), and is reverted once resumed. The
// reconcile-requested-at annotation asks for a reconcile and is echoed in
// status.
func TestSuspendAndReconcileNow(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "pause", 2, "hello"))
	rolledOutAndReady(t, ns, "pause")
	update(t, ns, "pause", func(s *webappv1.SimpleWebApp) { s.Spec.Suspend = true })
	waitCondition(t, ns, "pause", webappv1.ConditionReady, metav1.ConditionTrue, webappv1.ReasonSuspended)

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := get(t, ns, "pause-web", d); err != nil {
			return err
		}
		d.Spec.Replicas = new(int32(6))
		return k8s.Update(context.Background(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.HoldsFor(t, 2*time.Second, "the hand edit survives while suspended", func(context.Context) (bool, string) {
		d := &appsv1.Deployment{}
		if err := get(t, ns, "pause-web", d); err != nil {
			return false, err.Error()
		}
		return *d.Spec.Replicas == 6, fmt.Sprint(*d.Spec.Replicas)
	})
	if got, _ := kstatusOf(t, ns, "pause"); got == kstatus.FailedStatus {
		t.Errorf("kstatus %s while suspended", got)
	}

	// A requested reconcile is handled (echoed) even while suspended...
	update(t, ns, "pause", func(s *webappv1.SimpleWebApp) {
		s.Annotations = map[string]string{webappv1.AnnotationReconcileRequestedAt: "2026-12-01T12:00:00Z"}
	})
	testkit.WaitFor(t, timeout, "reconcile request echoed", func(context.Context) (bool, string) {
		s := &webappv1.SimpleWebApp{}
		if err := get(t, ns, "pause", s); err != nil {
			return false, err.Error()
		}
		return s.Status.LastHandledReconcileAt == "2026-12-01T12:00:00Z", s.Status.LastHandledReconcileAt
	})
	// ...and resuming reverts the hand edit.
	update(t, ns, "pause", func(s *webappv1.SimpleWebApp) { s.Spec.Suspend = false })
	deployment(t, ns, "pause", "hand edit reverted after resume", func(d *appsv1.Deployment) (bool, string) {
		return *d.Spec.Replicas == 2, fmt.Sprint(*d.Spec.Replicas)
	})
}

// Flux's reconcile.fluxcd.io/requestedAt asks for a reconcile too, also on a
// SimpleWebApp that already carries an older request of ours, and is echoed
// in status.lastHandledReconcileAt. That it forced a reconcile shows on an
// object holding a field that the operator's own field manager owns (as its
// create does) but the render lacks: no ordinary reconcile touches it, a
// requested one re-applies the object and removes the field.
func TestFluxReconcileRequest(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "flux", 2, "hello"))
	rolledOutAndReady(t, ns, "flux")
	requested := func(key, value string) {
		update(t, ns, "flux", func(s *webappv1.SimpleWebApp) {
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[key] = value
		})
	}
	echoed := func(want string) {
		t.Helper()
		testkit.WaitFor(t, timeout, "status.lastHandledReconcileAt "+want, func(context.Context) (bool, string) {
			s := &webappv1.SimpleWebApp{}
			if err := get(t, ns, "flux", s); err != nil {
				return false, err.Error()
			}
			return s.Status.LastHandledReconcileAt == want, s.Status.LastHandledReconcileAt
		})
	}
	// An earlier request of ours, as `kubectl annotate` or Argo CD's
	// reconcile-now leave behind.
	ours := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	requested(webappv1.AnnotationReconcileRequestedAt, ours)
	echoed(ours)

	const leftBehind = "example.com/left-behind"
	svc := service(t, ns, "flux")
	patch := client.MergeFrom(svc.DeepCopy())
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[leftBehind] = "x"
	if err := k8s.Patch(context.Background(), svc, patch, client.FieldOwner(render.ManagerName)); err != nil {
		t.Fatal(err)
	}
	stays := func(what string) {
		t.Helper()
		s := &corev1.Service{}
		if err := get(t, ns, "flux-web", s); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Annotations[leftBehind]; !ok {
			t.Fatalf("%s removed %s from the Service: only a requested reconcile should", what, leftBehind)
		}
	}
	// An ordinary reconcile, seen to have processed a new generation, leaves
	// the field alone.
	gen := update(t, ns, "flux", func(s *webappv1.SimpleWebApp) { s.Spec.Replicas = new(int32(3)) }).Generation
	testkit.WaitFor(t, timeout, fmt.Sprintf("generation %d observed", gen), func(context.Context) (bool, string) {
		s := &webappv1.SimpleWebApp{}
		if err := get(t, ns, "flux", s); err != nil {
			return false, err.Error()
		}
		return s.Status.ObservedGeneration >= gen, fmt.Sprint(s.Status.ObservedGeneration)
	})
	stays("a reconcile of a spec change")

	// Flux's request, as Flux writes it (RFC 3339 with nanoseconds).
	flux := time.Now().UTC().Format(time.RFC3339Nano)
	requested(webappv1.AnnotationFluxReconcileRequestedAt, flux)
	echoed(flux)
	testkit.WaitFor(t, timeout, "the requested reconcile removes "+leftBehind, func(context.Context) (bool, string) {
		s := &corev1.Service{}
		if err := get(t, ns, "flux-web", s); err != nil {
			return false, err.Error()
		}
		_, ok := s.Annotations[leftBehind]
		return !ok, fmt.Sprint(s.Annotations)
	})
	// The forced re-apply leaves a working app.
	rolledOutAndReady(t, ns, "flux")
}
