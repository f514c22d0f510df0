// Package generated fails when the committed generated files (deepcopy, CRD,
// RBAC role) differ from what `make manifests generate` makes from the markers.
package generated

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/internal/localcluster"
)

func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("go", "tool", "controller-gen",
		"object", "paths=./api/...", "output:object:dir="+filepath.Join(out, "object"),
		"rbac:roleName=manager-role", "crd", "paths=./...",
		"output:crd:dir="+filepath.Join(out, "crd"), "output:rbac:dir="+filepath.Join(out, "rbac"))
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	for generated, committed := range map[string]string{
		"object/zz_generated.deepcopy.go":    "api/v1/zz_generated.deepcopy.go",
		"crd/example.com_simplewebapps.yaml": "config/crd/bases/example.com_simplewebapps.yaml",
		"rbac/role.yaml":                     "config/rbac/role.yaml",
	} {
		want, err := os.ReadFile(filepath.Join(out, generated))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, committed))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make manifests generate` and commit the result", committed)
		}
	}
}

// `kubectl explain swa --recursive` describes every field: each property in
// the CRD schema has a description (from the Go doc comments).
func TestEveryFieldIsDescribed(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config/crd/bases/example.com_simplewebapps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	var walk func(path string, s apiextensionsv1.JSONSchemaProps)
	n := 0
	walk = func(path string, s apiextensionsv1.JSONSchemaProps) {
		for name, p := range s.Properties {
			field := path + "." + name
			if path == "" && (name == "apiVersion" || name == "kind" || name == "metadata") {
				continue
			}
			n++
			if strings.TrimSpace(p.Description) == "" {
				t.Errorf("%s has no description", field[1:])
			}
			walk(field, p)
			if p.Items != nil && p.Items.Schema != nil {
				walk(field+"[]", *p.Items.Schema)
			}
		}
	}
	walk("", *schema)
	if n < 30 {
		t.Fatalf("only %d fields walked", n)
	}
}
