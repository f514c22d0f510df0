// Package generated fails when the committed generated files (deepcopy, CRD,
// RBAC role) differ from what `make manifests generate` makes from the markers.
package generated

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"example.com/simplewebapp-operator/tests/cluster"
)

func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := cluster.RepoRoot()
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
