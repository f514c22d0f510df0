package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestDeletionRaces deletes SimpleWebApps at random points of their
// reconciles (0 to 1.5 s after their creation or a change, while the
// operator creates, applies or prunes their objects). 60 s after the last
// deletion no child is left, and the operator has stopped writing in the
// namespace (no error loop on what is gone).
func TestDeletionRaces(t *testing.T) {
	deletions := size(t, "deletions at random points", 20, 200)
	e := newEnv(t)
	ctx := t.Context()
	waitGarbageCollector(t, e)
	ns := testkit.Namespace(t, e.C, testkit.NS{Prefix: "del-", WaitForServiceAccount: true})
	op := e.start("operator", e.id, nil, "--leader-elect=false")
	diag := testkit.Diag(func() string { return "--- operator log tail ---\n" + op.LogTail(30) })

	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	t0 := time.Now()
	for i := range deletions {
		name := fmt.Sprintf("del-%d", i)
		swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Message: "hello"}}
		if err := e.C.Create(ctx, swa); err != nil {
			t.Fatal(err)
		}
		// Every third one is changed first (a new ConfigMap, a prune later).
		change := i%3 == 0
		delay := time.Duration(rng.IntN(1500)) * time.Millisecond
		changeAfter := time.Duration(rng.IntN(1000)) * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			if change {
				<-time.After(changeAfter)
				_ = e.C.Patch(ctx, swa, clientMergePatch(`{"spec":{"message":"changed"}}`))
			}
			<-time.After(delay) // the fault's timing, not a synchronisation
			if err := e.C.Delete(ctx, swa); err != nil && !apierrors.IsNotFound(err) {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		}()
		if i%10 == 9 {
			wg.Wait() // at most ten in flight
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("deletes failed: %v", errs)
	}
	lastDelete := time.Now()
	var goneAfter time.Duration
	testkit.WaitFor(t, 60*time.Second, "no SimpleWebApp and no child left", func(ctx context.Context) (bool, string) {
		var list webappv1.SimpleWebAppList
		if err := e.C.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		left, total, err := orphans(ctx, e.C, ns)
		if err != nil {
			return false, err.Error()
		}
		goneAfter = time.Since(lastDelete)
		return len(list.Items) == 0 && total == 0, fmt.Sprintf("%d SimpleWebApps, %d children: %v", len(list.Items), total, left)
	}, testkit.Every(500*time.Millisecond), diag)

	// No error loop: the operator stops writing in the namespace.
	quietFrom := time.Now()
	testkit.HoldsFor(t, 10*time.Second, "no operator write in the namespace", func(context.Context) (bool, string) {
		w := testkit.AuditFilter{User: e.id.User(), Namespace: ns, Verbs: testkit.WriteVerbs, From: quietFrom}.Filter(e.audit())
		return len(w) == 0, testkit.FormatAudit(w, 10)
	}, testkit.Every(time.Second), diag)
	events := e.audit()
	writes := testkit.AuditFilter{User: e.id.User(), Namespace: ns, Verbs: testkit.WriteVerbs}.Filter(events)
	failed := testkit.AuditFilter{User: e.id.User(), Namespace: ns, Verbs: testkit.WriteVerbs}.Count(events) -
		testkit.AuditFilter{User: e.id.User(), Namespace: ns, Verbs: testkit.WriteVerbs, Succeeded: true}.Count(events)
	t.Logf("FIGURE deletion races: %d SimpleWebApps deleted 0-1.5 s after creation or a change, in %s; everything gone %.1f s after the last delete; operator writes %d (%d refused by the API server) %v",
		deletions, lastDelete.Sub(t0).Round(time.Second), goneAfter.Seconds(), len(writes), failed, testkit.CountBy(writes, testkit.AuditByResource))
}

// waitGarbageCollector waits until kube-controller-manager's garbage
// collector deletes the dependents of a deleted SimpleWebApp: it notices a
// new CRD only at its next discovery resync, so in a fresh cluster the
// first deletions would measure that, not the operator.
func waitGarbageCollector(t *testing.T, e *chaosEnv) {
	t.Helper()
	ns := testkit.Namespace(t, e.C, testkit.NS{Prefix: "gc-probe-"})
	probes := 0
	testkit.WaitFor(t, 2*time.Minute, "the garbage collector deleting a dependent of a deleted SimpleWebApp", func(ctx context.Context) (bool, string) {
		probes++
		owner := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-probe-", Namespace: ns}}
		if err := e.C.Create(ctx, owner); err != nil {
			return false, err.Error()
		}
		dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: owner.Name, Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: webappv1.GroupVersion.String(), Kind: "SimpleWebApp", Name: owner.Name, UID: owner.UID}},
		}}
		if err := e.C.Create(ctx, dependent); err != nil {
			return false, err.Error()
		}
		if err := e.C.Delete(ctx, owner); err != nil {
			return false, err.Error()
		}
		_, seen, err := testkit.Poll(ctx, 100*time.Millisecond, 3*time.Second, func(ctx context.Context) (bool, string, error) {
			err := e.C.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.ConfigMap{})
			return apierrors.IsNotFound(err), fmt.Sprint(err), nil
		})
		return err == nil, fmt.Sprintf("probe %d: %s", probes, seen)
	}, testkit.Every(100*time.Millisecond))
}
