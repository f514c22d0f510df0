package operations

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

const shardLabel = "sharding.simplewebapp.example.com/key"

// TestShards runs two operator processes, one per shard
// (--watch-label-selector), as two operator Deployments would. Each
// reconciles exactly its half of the SimpleWebApps (its log has a reconcile
// line for every one of its apps and for nothing else, though every shard
// caches every managed child and sees their events); a SimpleWebApp
// relabelled to the other shard is handed over: the new shard reconciles it
// and writes nothing (every child keeps its resourceVersion, neither shard's
// write counter moves), and a later change of it is applied by the new shard.
func TestShards(t *testing.T) {
	ns := testkit.Namespace(t, env.C, testkit.NS{Name: "ops-shards", WaitForServiceAccount: true})
	a := startOperator(t, "shard-a", "--leader-elect=false", "--watch-label-selector="+shardLabel+"=a")
	b := startOperator(t, "shard-b", "--leader-elect=false", "--watch-label-selector="+shardLabel+"=b")
	a.waitReady(t)
	b.waitReady(t)

	shardOf := map[string]string{"a-0": "a", "a-1": "a", "a-2": "a", "b-0": "b", "b-1": "b", "b-2": "b"}
	for name, shard := range shardOf {
		app := newApp(ns, name, 1, "")
		app.Labels = map[string]string{shardLabel: shard}
		if err := env.C.Create(t.Context(), app); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(shardOf)) {
		waitAppReady(t, ns, name, 0, "")
	}

	// Exactly its half: every reconcile line of a shard's log is of one of
	// its apps (in every namespace: other tests' unlabelled apps and their
	// children are in the cluster too), and each of its apps has one.
	for _, op := range []struct {
		*operator
		shard string
	}{{a, "a"}, {b, "b"}} {
		got := reconciled(t, op.operator, 0)
		var want []string
		for name, shard := range shardOf {
			if shard == op.shard {
				want = append(want, ns+"/"+name)
			}
		}
		slices.Sort(want)
		if !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
			t.Errorf("shard %s reconciled %v, want exactly %v", op.shard, got, want)
		} else {
			t.Logf("FIGURE shard %s reconciled exactly its %d apps: %v", op.shard, len(want), got)
		}
	}

	// Hand over a-1 to shard b.
	moved := "a-1"
	children := childResourceVersions(t, ns, moved)
	writesA, writesB := objectWrites(t, a), objectWrites(t, b)
	fromLine := len(b.lines(t))
	t0 := time.Now()
	updateApp(t, ns, moved, func(swa *webappv1.SimpleWebApp) { swa.Labels[shardLabel] = "b" })
	testkit.WaitFor(t, time.Minute, "shard b to finish a reconcile of "+moved, func(context.Context) (bool, string) {
		for _, l := range b.lines(t)[fromLine:] {
			if isReconcileOf(ns, moved)(l) && strings.HasPrefix(l.msg(), "Reconcile done") || isReconcileOf(ns, moved)(l) && l.msg() == "Reconcile successful" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d new lines", len(b.lines(t))-fromLine)
	})
	t.Logf("FIGURE handover of %s to shard b reconciled after %s", moved, time.Since(t0).Round(time.Millisecond))
	testkit.HoldsFor(t, 3*time.Second, "no write by either shard in the handover", func(context.Context) (bool, string) {
		now := childResourceVersions(t, ns, moved)
		wa, wb := objectWrites(t, a), objectWrites(t, b)
		return maps.Equal(now, children) && wa == writesA && wb == writesB,
			fmt.Sprintf("children %v (before %v); object writes a %v→%v, b %v→%v", now, children, writesA, wa, writesB, wb)
	})

	// The new shard owns it now: a change is applied by b, not a.
	updateApp(t, ns, moved, func(swa *webappv1.SimpleWebApp) { swa.Spec.Replicas = ptr.To[int32](2) })
	waitAppReady(t, ns, moved, 0, "")
	if r, err := deploymentReplicas(t.Context(), ns, moved); err != nil || r != 2 {
		t.Fatalf("Deployment of %s: replicas %d, %v; want 2", moved, r, err)
	}
	if wa, wb := objectWrites(t, a), objectWrites(t, b); wa != writesA || wb <= writesB {
		t.Errorf("object writes after the change of %s: shard a %v→%v (want unchanged), shard b %v→%v (want more)", moved, writesA, wa, writesB, wb)
	}
}

// reconciled counts the reconcile lines ("Reconciling") of op's log from line
// from on, by namespace/name.
func reconciled(t *testing.T, op *operator, from int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, l := range op.lines(t)[from:] {
		if isReconcile(l) && l.msg() == "Reconciling" {
			out[l.str("namespace")+"/"+l.str("name")]++
		}
	}
	return out
}

// childResourceVersions are the resourceVersions of an app's Deployment,
// Service and ConfigMaps.
func childResourceVersions(t *testing.T, ns, app string) map[string]string {
	t.Helper()
	out := map[string]string{}
	sel := client.MatchingLabels{render.LabelInstance: app, render.LabelManagedBy: render.ManagerName}
	deps, svcs, cms := &appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}
	for _, l := range []client.ObjectList{deps, svcs, cms} {
		if err := env.C.List(t.Context(), l, client.InNamespace(ns), sel); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range deps.Items {
		out["Deployment "+d.Name] = d.ResourceVersion
	}
	for _, s := range svcs.Items {
		out["Service "+s.Name] = s.ResourceVersion
	}
	for _, c := range cms.Items {
		out["ConfigMap "+c.Name] = c.ResourceVersion
	}
	if len(out) < 3 {
		t.Fatalf("children of %s/%s: %v", ns, app, out)
	}
	return out
}

// objectWrites is the operator's simplewebapp_object_writes_total.
func objectWrites(t *testing.T, op *operator) float64 {
	t.Helper()
	ss, err := op.metrics()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := ss.get("simplewebapp_object_writes_total", nil)
	return v
}
