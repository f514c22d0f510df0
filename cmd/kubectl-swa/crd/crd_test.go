package crd

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The embedded CRD is the generated one: after `make manifests` changes it,
// copy it here (cp config/crd/bases/example.com_simplewebapps.yaml
// cmd/kubectl-swa/crd/).
func TestEmbeddedCRDIsGenerated(t *testing.T) {
	generated, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", "bases", File))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(generated, Manifest()) {
		t.Fatalf("cmd/kubectl-swa/crd/%s differs from config/crd/bases/%s: run cp config/crd/bases/%s cmd/kubectl-swa/crd/", File, File, File)
	}
	crd, err := SimpleWebApp()
	if err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Names.Kind != "SimpleWebApp" || len(crd.Spec.Versions) == 0 || crd.Spec.Versions[0].Schema == nil {
		t.Fatalf("the embedded CRD has no SimpleWebApp schema: %+v", crd.Spec.Names)
	}
}
