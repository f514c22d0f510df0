// Package install renders what installs the operator: Kustomize builds
// config/default (optionally with another image) in-process with krusty, for
// `make deploy` and `make build-installer` (through hack/render) and for the
// tests in tests/install. No kustomize CLI is needed.
package install

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/pkg/util"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// ImageName is the name of the operator image in config/default (set by the
// images: of config/manager/kustomization.yaml, tagged with the VERSION by
// `make sync-version`). There is no registry that serves it.
const ImageName = "simplewebapp-operator"

// Kustomize builds the kustomization in dir, like `kustomize build dir`.
// A non-empty image replaces the operator image (name[:tag][@digest]; a
// digest pins it), like `kustomize edit set image` in an overlay, without
// editing any file.
func Kustomize(dir, image string) ([]byte, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	target := dir
	if image != "" {
		// An overlay in a temporary directory with dir as its only base.
		tmp, err := os.MkdirTemp("", "swa-render-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		// kustomize accepts no absolute base: the way up from tmp instead.
		base, err := filepath.Rel(tmp, dir)
		if err != nil {
			return nil, err
		}
		name, tag, digest := util.SplitImageName(image)
		if name == "" {
			return nil, fmt.Errorf("image %q: no name", image)
		}
		k := types.Kustomization{
			TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
			Resources: []string{base},
			Images:    []types.Image{{Name: ImageName, NewName: name, NewTag: tag, Digest: digest}},
		}
		b, err := yaml.Marshal(k)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), b, 0o644); err != nil {
			return nil, err
		}
		target = tmp
	}
	// The output order of the kustomize CLI and `kubectl apply -k` ("legacy":
	// Namespace and CRD first, workloads last), so that a plain `kubectl apply
	// -f` creates what the others need first. krusty's default is no order.
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionUnspecified
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), target)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return m.AsYaml()
}
