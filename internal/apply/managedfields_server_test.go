package apply

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/render"
)

// TestTakeOver runs take-overs against a real kube-apiserver: the
// precondition and the managed-fields bookkeeping are the server's.
func TestTakeOver(t *testing.T) {
	env, err := localcluster.EnvtestEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ri := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace("default")
	t.Run("after a concurrent write", func(t *testing.T) { takeOverAfterAConcurrentWrite(t, ri) })
	t.Run("keeps the handoff fields", func(t *testing.T) { takeOverKeepsTheHandoffFields(t, ri) })
}

func deploymentNamed(name, image string, replicas any) *unstructured.Unstructured {
	spec := map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"app": name}},
			"spec":     map[string]any{"containers": []any{map[string]any{"name": "web", "image": image}}},
		},
	}
	if replicas != nil {
		spec["replicas"] = replicas
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     spec,
	}}
}

// A take-over races the Deployment controller, which writes a Deployment
// within milliseconds of an apply that changed its pod template. The patch
// must not then fail for good (it once did: a JSON patch's failed test of
// resourceVersion comes back as 422 Invalid, read as a refused apply): it
// reads the object again and merges what it holds now.
func takeOverAfterAConcurrentWrite(t *testing.T, ri dynamic.ResourceInterface) {
	ctx := context.Background()
	deployment := func(image string) *unstructured.Unstructured { return deploymentNamed("web", image, nil) }
	// Created as the operator creates (an Update entry of render.ManagerName),
	// then applied with a new image: the create's entry still owns fields
	// the apply does not, which is what a take-over merges.
	if _, err := ri.Create(ctx, deployment("nginx:1"), metav1.CreateOptions{FieldManager: render.ManagerName}); err != nil {
		t.Fatal(err)
	}
	body, err := deployment("nginx:2").MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	applied, err := ri.Patch(ctx, "web", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: render.ManagerName, Force: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	if !leftover(applied.GetManagedFields()) {
		t.Fatalf("no leftover after the apply: %+v", applied.GetManagedFields())
	}
	// Another writer, as the Deployment controller's revision annotation.
	concurrent, err := ri.Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"annotations":{"deployment.kubernetes.io/revision":"2"}}}`),
		metav1.PatchOptions{FieldManager: "kube-controller-manager"})
	if err != nil {
		t.Fatal(err)
	}
	if concurrent.GetResourceVersion() == applied.GetResourceVersion() {
		t.Fatal("the concurrent write did not change the resourceVersion")
	}

	if _, err := (&Applier{}).takeOver(ctx, ri, applied, nil); err != nil {
		t.Fatalf("take-over after a concurrent write: %v", err)
	}
	live, err := ri.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if leftover(live.GetManagedFields()) {
		t.Errorf("still a leftover after the take-over: %+v", live.GetManagedFields())
	}
	var ours, controller int
	for _, e := range live.GetManagedFields() {
		switch e.Manager {
		case render.ManagerName:
			ours++
			if e.Operation != metav1.ManagedFieldsOperationApply {
				t.Errorf("our entry is an %s, want the Apply entry only", e.Operation)
			}
		case "kube-controller-manager":
			controller++
		}
	}
	if ours != 1 || controller != 1 {
		t.Errorf("entries: %d of ours (want 1), %d of the concurrent writer (want 1, kept): %+v", ours, controller, live.GetManagedFields())
	}
	if live.GetAnnotations()["deployment.kubernetes.io/revision"] != "2" {
		t.Errorf("the concurrent writer's annotation is gone: %v", live.GetAnnotations())
	}
}

// The operator creates a Deployment with its replicas (the handoff field) in
// the POST and applies it without them; the first apply that changes it
// takes over the create's entry. The replicas must go to HandoffManager:
// merged into the operator's apply entry, its next apply would remove them
// and the Deployment would fall to 1 replica (what happens without the
// handoff paths, checked first, so this test can tell).
func takeOverKeepsTheHandoffFields(t *testing.T, ri dynamic.ResourceInterface) {
	ctx := context.Background()
	for _, c := range []struct {
		name         string
		handoffPaths []string
		replicas     int64
	}{
		{"no-handoff-paths", nil, 1},
		{"handoff-paths", []string{"spec.replicas"}, 3},
	} {
		if _, err := ri.Create(ctx, deploymentNamed(c.name, "nginx:1", int64(3)), metav1.CreateOptions{FieldManager: render.ManagerName}); err != nil {
			t.Fatal(err)
		}
		apply := func() *unstructured.Unstructured {
			body, err := deploymentNamed(c.name, "nginx:2", nil).MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			out, err := ri.Patch(ctx, c.name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: render.ManagerName, Force: ptr.To(true)})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		applied := apply()
		if !leftover(applied.GetManagedFields()) {
			t.Fatalf("%s: no leftover after the apply: %+v", c.name, applied.GetManagedFields())
		}
		if _, err := (&Applier{}).takeOver(ctx, ri, applied, c.handoffPaths); err != nil {
			t.Fatal(err)
		}
		live := apply() // what the render lacks is removed
		if got, _, _ := unstructured.NestedInt64(live.Object, "spec", "replicas"); got != c.replicas {
			t.Errorf("%s: %d replicas after the take-over and the next apply, want %d", c.name, got, c.replicas)
		}
		if leftover(live.GetManagedFields()) {
			t.Errorf("%s: still a leftover: %+v", c.name, live.GetManagedFields())
		}
		handoffOwnsReplicas := false
		for _, e := range live.GetManagedFields() {
			if e.Manager == HandoffManager && e.Operation == metav1.ManagedFieldsOperationApply && e.FieldsV1 != nil {
				handoffOwnsReplicas = strings.Contains(e.FieldsV1.GetRawString(), `"f:replicas"`)
			}
		}
		if want := c.handoffPaths != nil; handoffOwnsReplicas != want {
			t.Errorf("%s: %s owns spec.replicas: %v, want %v: %+v", c.name, HandoffManager, handoffOwnsReplicas, want, live.GetManagedFields())
		}
	}
}
