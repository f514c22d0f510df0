package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// The operator records an object's name in status.inventory before it
// creates the object. Otherwise a crash between the create and the status
// write leaves an object that no inventory lists and nothing ever prunes
// (found by tests/chaos TestCrashConsistency). Checked from the order of the
// writes: the first SimpleWebApp version whose inventory lists a child has a
// smaller resourceVersion than the child's creation.
func TestInventoryRecordedBeforeCreate(t *testing.T) {
	ns := testkit.Namespace(t, k8s, testNS)
	wc, err := client.NewWithWatch(adminCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	type version struct {
		rv        uint64
		inventory []webappv1.ObjectReference
		status    webappv1.SimpleWebAppStatus
	}
	var (
		mu       sync.Mutex
		versions []version             // of the SimpleWebApp, in watch order
		created  = map[string]uint64{} // ConfigMap -> creation resourceVersion
		lastRV   uint64
	)
	record := func(list client.ObjectList, onEvent func(watch.Event)) {
		w, err := wc.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				onEvent(ev)
			}
		}()
	}
	rvOf := func(o client.Object) uint64 {
		rv, _ := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
		return rv
	}
	record(&webappv1.SimpleWebAppList{}, func(ev watch.Event) {
		swa, ok := ev.Object.(*webappv1.SimpleWebApp)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		versions = append(versions, version{rvOf(swa), slices.Clone(swa.Status.Inventory), *swa.Status.DeepCopy()})
		lastRV = max(lastRV, rvOf(swa))
	})
	// Creation resourceVersions by name. The objects are written in waves,
	// each in parallel: the Deployment only after the ConfigMaps its pods
	// mount exist.
	recordCreations := func(list client.ObjectList, into map[string]uint64) {
		record(list, func(ev watch.Event) {
			o, ok := ev.Object.(client.Object)
			if !ok || ev.Type != watch.Added {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			into[o.GetName()] = rvOf(o)
		})
	}
	deployments := map[string]uint64{} // Deployment -> creation resourceVersion
	recordCreations(&corev1.ConfigMapList{}, created)
	recordCreations(&appsv1.DeploymentList{}, deployments)

	create(t, newWebApp(ns, "inv", 1, "first"))
	readyRV := rvOf(rolledOutAndReady(t, ns, "inv"))
	first := deployment(t, ns, "inv", "Deployment of inv", func(*appsv1.Deployment) (bool, string) { return true, "" })
	update(t, ns, "inv", func(s *webappv1.SimpleWebApp) { s.Spec.Message = "second" })
	markRolledOut(t, deployment(t, ns, "inv", "Deployment of inv with the new message", func(d *appsv1.Deployment) (bool, string) {
		return d.Generation > first.Generation, fmt.Sprintf("generation %d", d.Generation)
	}))
	final := waitCondition(t, ns, "inv", webappv1.ConditionReady, metav1.ConditionTrue, "Available")
	// Pruned: the first message's ConfigMap leaves the inventory.
	oldContent := ""
	for _, v := range first.Spec.Template.Spec.Volumes {
		if v.Name == "content" && v.ConfigMap != nil {
			oldContent = v.ConfigMap.Name
		}
	}
	testkit.WaitFor(t, timeout, "ConfigMap "+oldContent+" pruned from status.inventory", func(context.Context) (bool, string) {
		if err := get(t, ns, "inv", final); err != nil {
			return false, err.Error()
		}
		listed := slices.ContainsFunc(final.Status.Inventory, func(r webappv1.ObjectReference) bool { return r.Name == oldContent })
		return !listed, fmt.Sprint(final.Status.Inventory)
	})
	testkit.WaitFor(t, timeout, "the watch to reach the SimpleWebApp's last version", func(context.Context) (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return lastRV >= rvOf(final), fmt.Sprintf("%d of %d", lastRV, rvOf(final))
	})

	mu.Lock()
	defer mu.Unlock()
	// Recording the inventory first costs no extra write: a new app's status
	// is written twice until Ready (the inventory with the status the apply
	// ends in, then Ready), as before the inventory came first (issue 10).
	statusWrites := 0
	for i := 1; i < len(versions) && versions[i].rv <= readyRV; i++ {
		if !equality.Semantic.DeepEqual(versions[i].status, versions[i-1].status) {
			statusWrites++
		}
	}
	if statusWrites > 2 {
		t.Errorf("%d status writes until Ready, want at most 2", statusWrites)
	}
	t.Logf("%d status writes from create to Ready", statusWrites)
	if len(created) < 2 {
		t.Fatalf("ConfigMaps created: %v, want one per message", created)
	}
	for _, v := range first.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		deploymentCreated := deployments[first.Name]
		if rv, ok := created[v.ConfigMap.Name]; !ok || deploymentCreated == 0 || rv > deploymentCreated {
			t.Errorf("ConfigMap %s created at resourceVersion %d (seen: %t), the Deployment at %d: want the ConfigMap first", v.ConfigMap.Name, rv, ok, deploymentCreated)
		}
	}
	for name, createdAt := range created {
		listed := uint64(0)
		for _, v := range versions {
			if slices.ContainsFunc(v.inventory, func(r webappv1.ObjectReference) bool { return r.Kind == "ConfigMap" && r.Name == name }) {
				listed = v.rv
				break
			}
		}
		switch {
		case listed == 0:
			t.Errorf("ConfigMap %s (created at resourceVersion %d) never listed in status.inventory", name, createdAt)
		case listed > createdAt:
			t.Errorf("ConfigMap %s created at resourceVersion %d, first listed in status.inventory at %d: a crash in between would orphan it", name, createdAt, listed)
		}
	}
}
