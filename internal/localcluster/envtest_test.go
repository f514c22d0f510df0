package localcluster_test

import (
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"example.com/simplewebapp-operator/internal/localcluster"
)

const proofCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.proof.example.com
spec:
  group: proof.example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string, default: blue}
`

// TestEnvtestCRDDefaulting proves the "api" profile through envtest: a CRD
// installs and the API server applies its structural-schema default.
func TestEnvtestCRDDefaulting(t *testing.T) {
	crdDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(crdDir, "widget.yaml"), []byte(proofCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := localcluster.EnvtestEnvironment(crdDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest start: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest stop: %v", err)
		}
	})

	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "proof.example.com", Version: "v1", Resource: "widgets"}).Namespace("default")
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "proof.example.com/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": "w1"},
		"spec":       map[string]any{"size": int64(3)},
	}}
	if _, err := widgets.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := widgets.Get(t.Context(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size")
	color, _, _ := unstructured.NestedString(got.Object, "spec", "color")
	if size != 3 || color != "blue" {
		t.Fatalf("round-tripped spec = %v, want size 3 and the defaulted color blue", got.Object["spec"])
	}
}
