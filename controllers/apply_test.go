package controllers

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// contains decides, without a request, whether a live object (from the
// cache, with defaults and status) still holds everything the operator
// wrote.
func TestContains(t *testing.T) {
	live := map[string]any{
		"spec": map[string]any{"replicas": int64(3), "strategy": map[string]any{"type": "RollingUpdate"},
			"ports": []any{map[string]any{"port": int64(80), "protocol": "TCP"}}},
		"status": map[string]any{"ready": int64(3)},
	}
	for _, tc := range []struct {
		name string
		want any
		ok   bool
	}{
		{"subset", map[string]any{"spec": map[string]any{"replicas": int64(3)}}, true},
		{"number types differ", map[string]any{"spec": map[string]any{"replicas": float64(3)}}, true},
		{"list element subset", map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}}, true},
		{"value differs", map[string]any{"spec": map[string]any{"replicas": int64(4)}}, false},
		{"missing field", map[string]any{"spec": map[string]any{"paused": true}}, false},
		{"list length differs", map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}, map[string]any{"port": int64(81)}}}}, false},
		{"empty map wanted, none live", map[string]any{"metadata": map[string]any{}}, true},
	} {
		if got := contains(live, tc.want); got != tc.ok {
			t.Errorf("%s: contains = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// Only changes beyond status run the pipeline at once.
func TestChangedBeyondStatus(t *testing.T) {
	base := func() *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Generation, d.ResourceVersion = 2, "10"
		d.Labels = map[string]string{"a": "b"}
		d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: ManagerName, Operation: metav1.ManagedFieldsOperationApply}}
		return d
	}
	statusOnly := base()
	statusOnly.ResourceVersion, statusOnly.Status.ReadyReplicas = "11", 3
	statusOnly.ManagedFields = append(statusOnly.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kube-controller-manager", Subresource: "status"})
	spec := base()
	spec.Generation, spec.ResourceVersion = 3, "11"
	label := base()
	label.ResourceVersion, label.Labels = "11", map[string]string{"a": "c"}
	edit := base()
	edit.ResourceVersion = "11"
	edit.ManagedFields = append(edit.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate})
	cm := &corev1.ConfigMap{}
	cm.ResourceVersion = "11"
	for name, tc := range map[string]struct {
		changed bool
		old     *appsv1.Deployment
		new     *appsv1.Deployment
	}{
		"status only": {false, base(), statusOnly},
		"spec":        {true, base(), spec},
		"labels":      {true, base(), label},
		"a hand edit": {true, base(), edit},
	} {
		if got := changedBeyondStatus(tc.old, tc.new); got != tc.changed {
			t.Errorf("%s: %v, want %v", name, got, tc.changed)
		}
	}
	if !changedBeyondStatus(&corev1.ConfigMap{}, cm) {
		t.Error("a kind without generation: every change counts")
	}
}

// The cache keeps which foreign managers own what outside status: not the
// operator's own entries, nor those of subresources.
func TestTrimManagedFields(t *testing.T) {
	raw := &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}
	sidecar := &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{}}}}}`)}
	d := &appsv1.Deployment{}
	d.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: ManagerName, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: raw},
		{Manager: ManagerName, Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: raw},
		{Manager: HandoffManager, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: raw},
		{Manager: "kube-controller-manager", Subresource: "status", FieldsV1: raw},
		{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: sidecar},
		{Manager: "kubectl-rollout", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: raw},
	}
	out, _ := trimManagedFields(d)
	got := out.(*appsv1.Deployment).ManagedFields
	// The foreign one without sensitive fields keeps only its presence; the
	// sidecar's manager keeps its fields (a take-over reads them); our
	// entries and the status manager are gone.
	if len(got) != 2 || got[0].Manager != "kubectl-edit" || got[0].FieldsV1 == nil || got[1].Manager != "kubectl-rollout" || got[1].FieldsV1 != nil {
		t.Errorf("kept %+v", got)
	}
	if fields := foreignSensitiveFields(got); len(fields) != 1 {
		t.Errorf("sensitive fields after the trim: %v, want the sidecar's manager", fields)
	}
}

// Foreign managers are taken over only for fields that matter.
func TestForeignSensitiveFields(t *testing.T) {
	entry := func(manager, sub, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Subresource: sub, FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	for _, tc := range []struct {
		name string
		e    metav1.ManagedFieldsEntry
		want int
	}{
		{"a sidecar", entry("kubectl-edit", "", `{"f:spec":{"f:template":{"f:spec":{"f:containers":{}}}}}`), 1},
		{"externalIPs", entry("kubectl-edit", "", `{"f:spec":{"f:externalIPs":{}}}`), 1},
		{"rollout restart", entry("kubectl-rollout", "", `{"f:spec":{"f:template":{"f:metadata":{"f:annotations":{}}}}}`), 0},
		{"revision annotation", entry("kube-controller-manager", "", `{"f:metadata":{"f:annotations":{}}}`), 0},
		{"hand scaling", entry("kubectl-scale", "", `{"f:spec":{"f:replicas":{}}}`), 0},
		{"the autoscaler", entry("kube-controller-manager", "scale", `{"f:spec":{"f:replicas":{}}}`), 0},
		{"ours", entry(ManagerName, "", `{"f:spec":{"f:template":{"f:spec":{}}}}`), 0},
	} {
		if got := foreignSensitiveFields([]metav1.ManagedFieldsEntry{tc.e}); len(got) != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}

func TestUpgradeSlots(t *testing.T) {
	s := &upgradeSlots{max: 2}
	a, b, c := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}, types.NamespacedName{Name: "c"}
	if !s.acquire(a, false) || !s.acquire(b, false) || s.acquire(c, false) {
		t.Fatal("the third upgrade got a slot")
	}
	if !s.acquire(a, false) {
		t.Error("a holder lost its slot")
	}
	if !s.acquire(c, true) || s.inFlight() != 3 {
		t.Error("an upgrade under way (after a restart) must get its slot back")
	}
	s.release(a)
	s.release(c)
	if !s.acquire(types.NamespacedName{Name: "d"}, false) {
		t.Error("no slot after releases")
	}
	if !(&upgradeSlots{}).acquire(a, false) {
		t.Error("0 means unbounded")
	}
}

func TestIsUpgrade(t *testing.T) {
	st := func(version, healthy string) *webappv1.SimpleWebApp {
		return &webappv1.SimpleWebApp{Status: webappv1.SimpleWebAppStatus{Version: version, LastHealthyVersion: healthy}}
	}
	for _, tc := range []struct {
		name string
		swa  *webappv1.SimpleWebApp
		to   string
		want bool
	}{
		{"first install", st("", ""), "1.0.0", false},
		{"same version", st("1.0.0", "1.0.0"), "1.0.0", false},
		{"a new version", st("1.0.0", "1.0.0"), "1.1.0", true},
		{"back to the healthy one", st("1.1.0", "1.0.0"), "1.0.0", false},
		{"never healthy yet", st("1.0.0", ""), "1.1.0", false},
	} {
		if got := isUpgrade(tc.swa, Release{Version: tc.to}); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}

// A fight over a field: the first corrections go at once, then at most one
// write per growing backoff, each reported with the other manager's name.
func TestFightBackoff(t *testing.T) {
	var f fights
	key := objectKey{Kind: "Deployment", Name: "x"}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	writes := 0
	var last error
	for i := range 100 { // another manager changes the object 10 times a second for 10 s
		at := now.Add(time.Duration(i) * 100 * time.Millisecond)
		ok, err := f.correct(key, "Deployment", "x-web", "fighter", at)
		if ok {
			writes++
			// The operator's own write comes back through the cache: the
			// object is as rendered until the other manager changes it again.
			f.settled(key, at.Add(20*time.Millisecond))
		}
		if err != nil {
			last = err
		}
	}
	if writes > fightThreshold+6 {
		t.Errorf("%d writes in 10 s of fighting", writes)
	}
	if last == nil || !strings.Contains(last.Error(), `"fighter"`) || reasonOf(last) != "" && reasonOf(last) != webappv1.ReasonFieldConflict {
		t.Errorf("fight reported as %v", last)
	}
	// A refused correction says when it may go: the reconcile comes back
	// then, not after the rate limiter's backoff, which grows with every
	// failure of the fight (the object would stay wrong for minutes after
	// the other manager stopped).
	ok, err := f.correct(key, "Deployment", "x-web", "fighter", now.Add(10*time.Second))
	var se *StepError
	if ok || !errors.As(err, &se) || se.RetryAfter <= 0 || se.RetryAfter > fightMaxBackoff {
		t.Errorf("a correction during the backoff: %v, %v; want refused with a RetryAfter within (0, %s]", ok, err, fightMaxBackoff)
	}
	f.settled(key, now.Add(time.Hour))
	if ok, err := f.correct(key, "Deployment", "x-web", "fighter", now.Add(time.Hour)); !ok || err != nil {
		t.Errorf("after settling a correction is immediate again: %v %v", ok, err)
	}
}

// A write that changed only a Deployment's metadata bumps its generation
// but rolls nothing: its status still holds when the Deployment controller
// had observed the previous generation, and only then.
func TestObservedIfMetadataOnly(t *testing.T) {
	dep := func(gen, observed int64, replicas int32, image string) *appsv1.Deployment {
		d := deployment(gen, observed, replicas, replicas, replicas)
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "web", Image: image}}
		return d
	}
	for _, tc := range []struct {
		name            string
		before, written *appsv1.Deployment
		observed        int64
	}{
		{"an annotation added: still observed", dep(1, 1, 2, "a"), dep(2, 1, 2, "a"), 2},
		{"the template changed: the controller must observe it", dep(1, 1, 2, "a"), dep(2, 1, 2, "b"), 1},
		{"replicas changed: the controller must observe it", dep(1, 1, 2, "a"), dep(2, 1, 3, "a"), 1},
		{"not observed before the write: still not", dep(2, 1, 2, "a"), dep(3, 1, 2, "a"), 1},
	} {
		observedIfMetadataOnly(tc.before, tc.written)
		if got := tc.written.Status.ObservedGeneration; got != tc.observed {
			t.Errorf("%s: observedGeneration %d, want %d", tc.name, got, tc.observed)
		}
	}
}
