// Package crd embeds the SimpleWebApp CRD as `make manifests` generates it
// (config/crd/bases), so that `kubectl swa render` validates offline with the
// schema and the CEL rules the API server enforces. go:embed cannot reach
// config/ from here: crd_test.go fails when the copy differs.
package crd

import (
	_ "embed"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// File is the name of the CRD in config/crd/bases and here.
const File = "example.com_simplewebapps.yaml"

//go:embed example.com_simplewebapps.yaml
var manifest []byte

// SimpleWebApp is the embedded CRD.
func SimpleWebApp() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(manifest, crd); err != nil {
		return nil, err
	}
	return crd, nil
}

// Manifest is the embedded CRD as generated.
func Manifest() []byte { return manifest }
