package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// rival is the other field manager of the field fight.
const rival = "rival-deployer"

// TestFieldFight: another field manager force-applies a different image on
// a managed Deployment ten times a second. From the audit log the operator
// writes that Deployment at most once a second (backoff); the SimpleWebApp
// reports FieldConflict and a Warning event names the rival within 30 s;
// once the fight stops, the rendered image is restored.
func TestFieldFight(t *testing.T) {
	// 30 s at least: the first three corrections go at once by design (a
	// one-off hand edit is fixed without delay), the backoff shows after.
	fightFor := time.Duration(size(t, "fight seconds", 30, 60)) * time.Second
	e := newEnv(t)
	ctx := t.Context()
	ns := testkit.Namespace(t, e.C, testkit.NS{Prefix: "fight-", WaitForServiceAccount: true})
	op := e.start("operator", e.id, nil, "--leader-elect=false")
	diag := testkit.Diag(func() string { return "--- operator log tail ---\n" + op.LogTail(30) })
	names := e.createApps(ctx, ns, 1, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Message: "fight"})
	testkit.WaitFor(t, 2*time.Minute, "the SimpleWebApp Ready", func(ctx context.Context) (bool, string) {
		return converged(ctx, e.C, ns, testkit.ChannelVersion(t, "stable"))
	}, testkit.Every(200*time.Millisecond), diag)
	swa := &webappv1.SimpleWebApp{}
	if err := e.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: names[0]}, swa); err != nil {
		t.Fatal(err)
	}
	depName := ""
	for _, r := range swa.Status.Inventory {
		if r.Kind == "Deployment" {
			depName = r.Name
		}
	}
	dep := &appsv1.Deployment{}
	if err := e.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: depName}, dep); err != nil {
		t.Fatal(err)
	}
	container, image := dep.Spec.Template.Spec.Containers[0].Name, dep.Spec.Template.Spec.Containers[0].Image

	// The rival: a force-apply of its own image every 100 ms.
	body := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": depName, "namespace": ns},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": container, "image": "rival/web:6.6.6"}}}}},
	}}
	var (
		mu        sync.Mutex
		applies   int
		applyErrs []string
	)
	fightCtx, stopFight := context.WithCancel(ctx)
	fought := make(chan struct{})
	fightStart := time.Now()
	go func() {
		defer close(fought)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(fightFor); time.Now().Before(end); {
			select {
			case <-fightCtx.Done():
				return
			case <-tick.C:
			}
			err := e.C.Patch(fightCtx, body.DeepCopy(), client.Apply, client.FieldOwner(rival), client.ForceOwnership) //nolint:staticcheck // server-side apply of an unstructured body
			mu.Lock()
			applies++
			if err != nil && len(applyErrs) < 5 {
				applyErrs = append(applyErrs, err.Error())
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { stopFight(); <-fought })

	// Reported within 30 s: the condition and a Warning event naming the rival.
	var reportedAfter time.Duration
	testkit.WaitFor(t, 30*time.Second, "Ready reason FieldConflict and a Warning FieldConflict event naming "+rival, func(ctx context.Context) (bool, string) {
		got := &webappv1.SimpleWebApp{}
		if err := e.C.Get(ctx, client.ObjectKeyFromObject(swa), got); err != nil {
			return false, err.Error()
		}
		ready := apimeta.FindStatusCondition(got.Status.Conditions, webappv1.ConditionReady)
		n, seen, err := operatorEvents(ctx, e.C, ns, string(swa.UID), "Warning", webappv1.ReasonFieldConflict)
		if err != nil {
			return false, err.Error()
		}
		named := strings.Contains(seen, rival)
		reportedAfter = time.Since(fightStart)
		return ready != nil && ready.Reason == webappv1.ReasonFieldConflict && strings.Contains(ready.Message, rival) && n > 0 && named,
			fmt.Sprintf("Ready %+v; events:\n%s", ready, seen)
	}, testkit.Every(100*time.Millisecond), diag)
	<-fought
	fightEnd := time.Now()

	var restoredAfter time.Duration
	testkit.WaitFor(t, 2*time.Minute, "the rendered image "+image+" restored and the SimpleWebApp Ready", func(ctx context.Context) (bool, string) {
		d := &appsv1.Deployment{}
		if err := e.C.Get(ctx, client.ObjectKeyFromObject(dep), d); err != nil {
			return false, err.Error()
		}
		restoredAfter = time.Since(fightEnd)
		ok, seen := converged(ctx, e.C, ns, testkit.ChannelVersion(t, "stable"))
		got := d.Spec.Template.Spec.Containers[0].Image
		return got == image && ok, "image " + got + "; " + seen
	}, testkit.Every(100*time.Millisecond), diag)

	mu.Lock()
	defer mu.Unlock()
	if len(applyErrs) > 0 {
		t.Logf("rival apply errors (first %d): %v", len(applyErrs), applyErrs)
	}
	events := e.audit()
	window := testkit.AuditFilter{Resource: "deployments", Subresource: testkit.NoSubresource, Namespace: ns, Name: depName,
		Verbs: testkit.WriteVerbs, From: fightStart, To: fightEnd}
	ours := window
	ours.User = e.id.User()
	opWrites := ours.Filter(events)
	theirs := 0
	for _, ev := range window.Filter(events) {
		if strings.Contains(ev.RequestURI, "fieldManager="+rival) {
			theirs++
		}
	}
	secs := fightEnd.Sub(fightStart).Seconds()
	reported := fightStart.Add(reportedAfter)
	steady := ours
	steady.From = reported
	steadyRate := float64(steady.Count(events)) / fightEnd.Sub(reported).Seconds()
	failed := len(opWrites) - func() int { f := ours; f.Succeeded = true; return f.Count(events) }()
	opRate, rivalRate := float64(len(opWrites))/secs, float64(theirs)/secs
	t.Logf("FIGURE field fight: rival %d applies in %.1f s (%.1f/s), operator %d writes of the Deployment (%.2f/s; %d refused by the API server; %.2f/s once the fight was reported); FieldConflict condition and Warning event naming the rival %.1f s after the fight began; image restored %.1f s after it ended",
		theirs, secs, rivalRate, len(opWrites), opRate, failed, steadyRate, reportedAfter.Seconds(), restoredAfter.Seconds())
	if theirs < int(secs*5) {
		t.Errorf("the rival applied only %d times in %.1f s: no fight at 10/s to judge (errors: %v)", theirs, secs, applyErrs)
	}
	// Judged once the fight is known: the first three corrections of a
	// window go at once by design (each is up to three requests: apply,
	// take-over of the other manager's fields, apply).
	if steadyRate > 1 {
		t.Errorf("once the fight was reported the operator wrote the Deployment %d times in %.1f s (%.2f/s), want at most 1/s:\n%s",
			steady.Count(events), fightEnd.Sub(reported).Seconds(), steadyRate, testkit.FormatAudit(opWrites, 40))
	}
}
