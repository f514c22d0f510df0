package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

// An object that happens to have a rendered object's name is never taken
// over: the SimpleWebApp is Stalled/ObjectNotOwned, and the object keeps its
// content, has no owner added, and is not deleted with the SimpleWebApp.
func TestExistingObjectIsNotAdopted(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-web", Labels: map[string]string{"owner": "someone-else"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 5432}}},
	}
	create(t, theirs)
	create(t, newWebApp(ns, "taken", 1, "hello"))
	got := waitCondition(t, ns, "taken", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonObjectNotOwned)
	if msg := findCondition(got, webappv1.ConditionStalled).Message; !strings.Contains(msg, "Service taken-web") {
		t.Errorf("message %q does not name the object", msg)
	}
	after := &corev1.Service{}
	if err := get(t, ns, "taken-web", after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != theirs.ResourceVersion || len(after.OwnerReferences) != 0 {
		t.Errorf("the existing Service was written: resourceVersion %s → %s, owners %v", theirs.ResourceVersion, after.ResourceVersion, after.OwnerReferences)
	}
	testkit.WaitFor(t, timeout, "ObjectNotOwned event", func(context.Context) (bool, string) {
		return hasEvent(t, ns, "taken", webappv1.ReasonObjectNotOwned), "none yet"
	})
}

// A ConfigMap pre-created under the content-hashed name the next message
// will have is not adopted either: the change stalls and the running objects
// stay as they were.
func TestPrecreatedNextConfigMapIsNotAdopted(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "hash", 1, "first"))
	rolledOutAndReady(t, ns, "hash")

	next := newWebApp(ns, "hash", 1, "second")
	rel, err := render.Channels{FS: testChannels()}.Resolve(context.Background(), next.Spec)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := render.Render(rel, next)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, o := range rendered.Objects {
		if o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), "hash-web-content-") {
			name = o.GetName()
		}
	}
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"message": "planted"}})
	before := snapshot(t, ns)

	update(t, ns, "hash", func(s *webappv1.SimpleWebApp) { s.Spec.Message = "second" })
	waitCondition(t, ns, "hash", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonObjectNotOwned)
	if after := snapshot(t, ns); after != before {
		t.Errorf("objects changed:\nbefore %s\nafter  %s", before, after)
	}
}

// Fields another field manager adds by hand that matter for security or
// exposure (a container, hostNetwork, a Service's externalIPs) are removed,
// with a Normal event naming that manager; a pod template annotation (as
// `kubectl rollout restart` writes) is left alone.
func TestHandAddedFieldsAreRemoved(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "edit", 1, "steady"))
	d := deployment(t, ns, "edit", "Deployment created", func(*appsv1.Deployment) (bool, string) { return true, "" })
	containers := len(d.Spec.Template.Spec.Containers)

	// The way `kubectl edit` writes: an update with its own field manager.
	edit := func(obj client.Object, change func()) {
		t.Helper()
		// The operator may write the object between our read and our write;
		// like kubectl edit, read again and retry on a conflict.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := get(t, ns, obj.GetName(), obj); err != nil {
				return err
			}
			change()
			return k8s.Update(context.Background(), obj, client.FieldOwner("kubectl-edit"))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	edit(d, func() {
		d.Spec.Template.Spec.HostNetwork = true
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "miner", Image: "evil"})
	})
	deployment(t, ns, "edit", "sidecar and hostNetwork removed", func(d *appsv1.Deployment) (bool, string) {
		return len(d.Spec.Template.Spec.Containers) == containers && !d.Spec.Template.Spec.HostNetwork,
			fmt.Sprintf("%d containers, hostNetwork %v", len(d.Spec.Template.Spec.Containers), d.Spec.Template.Spec.HostNetwork)
	})
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("took %s, want within 10s", took)
	}
	testkit.WaitFor(t, timeout, "DriftCorrected event naming kubectl-edit", func(context.Context) (bool, string) {
		return eventWith(t, ns, "edit", "DriftCorrected", "kubectl-edit"), "none yet"
	})

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "edit-web"}}
	edit(svc, func() { svc.Spec.ExternalIPs = []string{"203.0.113.7"} })
	testkit.WaitFor(t, timeout, "externalIPs removed", func(context.Context) (bool, string) {
		if err := get(t, ns, "edit-web", svc); err != nil {
			return false, err.Error()
		}
		return len(svc.Spec.ExternalIPs) == 0, fmt.Sprint(svc.Spec.ExternalIPs)
	})

	edit(d, func() {
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = "now"
	})
	testkit.HoldsFor(t, 2*time.Second, "a restart annotation is left alone", func(context.Context) (bool, string) {
		now := &appsv1.Deployment{}
		if err := get(t, ns, "edit-web", now); err != nil {
			return false, err.Error()
		}
		return now.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "now", fmt.Sprint(now.Spec.Template.Annotations)
	})
}

// A write the API server refuses (here a negative probe period, which the
// package lets patches set) is reported with the object and the server's message,
// not retried in silence; the running objects stay.
func TestRefusedWriteIsReported(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	create(t, newWebApp(ns, "refused", 1, "fine"))
	rolledOutAndReady(t, ns, "refused")
	before := snapshot(t, ns)
	update(t, ns, "refused", func(s *webappv1.SimpleWebApp) {
		s.Spec.Patches = []webappv1.Patch{{Target: webappv1.PatchTarget{Kind: "Deployment", Name: "web"},
			Patch: "spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        readinessProbe: {periodSeconds: -5}\n"}}
	})
	got := waitCondition(t, ns, "refused", webappv1.ConditionStalled, metav1.ConditionTrue, webappv1.ReasonApplyRejected)
	msg := findCondition(got, webappv1.ConditionStalled).Message
	if !strings.Contains(msg, "Deployment refused-web") || !strings.Contains(msg, "must be greater than or equal to 0") {
		t.Errorf("message %q does not name the object and the server's reason", msg)
	}
	if after := snapshot(t, ns); after != before {
		t.Errorf("objects changed:\nbefore %s\nafter  %s", before, after)
	}
}
