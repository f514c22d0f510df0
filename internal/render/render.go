package render

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// instanceFile is where the package reads the SimpleWebApp being rendered.
const instanceFile = "instance.yaml"

// Limits that keep one SimpleWebApp from costing the operator more than a
// bounded amount of memory and CPU, whatever its spec says.
const (
	// maxRenderedBytes caps the JSON size of everything one SimpleWebApp
	// renders (the packages here render a small fraction of it).
	maxRenderedBytes = 512 << 10
	// maxRenderedObjects caps how many objects one SimpleWebApp renders.
	maxRenderedObjects = 32
)

func init() {
	// kustomize runs JSON 6902 patches through this library, whose copy
	// operation is unbounded by default (a 1 KiB patch can grow a document
	// exponentially). spec.patches may not use copy or move at all; this is
	// the second line of defence, as the API server sets it too.
	jsonpatch.AccumulatedCopySizeLimit = maxRenderedBytes
}

// Render builds the objects of one SimpleWebApp from a package version: the
// package rendered with kustomize in memory for the spec, the user's patches
// checked against what the package lets them change, the package's
// directives acted on, and every object checked against the security floor.
// It is a pure function of (package files, object identity, spec): the
// reconciler, the golden tests and `kubectl swa render` all call it.
func Render(rel Release, swa *webappv1.SimpleWebApp) (*Rendered, error) {
	return render(rel, swa, kustomizer{})
}

// Renderer renders SimpleWebApps: Cache does, remembering renders.
type Renderer interface {
	Render(ctx context.Context, rel Release, swa *webappv1.SimpleWebApp) (*Rendered, error)
}

// builder runs kustomize for a SimpleWebApp with the given patches: the
// objects (directive annotations still on them) and the instance document
// the package's directives are evaluated against. kustomizer runs it every
// time; templates run it once per package and spec shape.
type builder interface {
	build(rel Release, swa *webappv1.SimpleWebApp, patches []webappv1.Patch) ([]*unstructured.Unstructured, map[string]any, error)
}

// stager is a builder that keeps what it builds for later renders
// (templates): stage returns the builder for one render and commit, which
// keeps what that builder built. render commits only a render that passed the
// patch policy and the security floor, so a refused one leaves nothing behind.
type stager interface {
	stage() (b builder, commit func())
}

func render(rel Release, swa *webappv1.SimpleWebApp, b builder) (*Rendered, error) {
	commit := func() {}
	if s, ok := b.(stager); ok {
		b, commit = s.stage()
	}
	// The user's patch text is read here and nowhere else (userpatch.go).
	patches, err := preparePatches(swa.Spec.Patches)
	if err != nil {
		return nil, err
	}
	objs, instance, err := b.build(rel, swa, patches)
	if err != nil {
		return nil, err
	}
	base := objs
	if len(patches) > 0 {
		if base, _, err = b.build(rel, swa, nil); err != nil {
			return nil, err
		}
		policy, err := loadPatchPolicy(rel)
		if err != nil {
			return nil, err
		}
		if err := policy.check(base, objs); err != nil {
			return nil, err
		}
	}
	out, err := applyDirectives(rel, objs, instance)
	if err != nil {
		return nil, err
	}
	if err := checkFloor(swa, out, base); err != nil {
		return nil, err
	}
	commit()
	return out, nil
}

// kustomizer builds with kustomize every time.
type kustomizer struct{}

func (kustomizer) build(rel Release, swa *webappv1.SimpleWebApp, patches []webappv1.Patch) ([]*unstructured.Unstructured, map[string]any, error) {
	instance, err := instanceFor(rel.Files, swa)
	if err != nil {
		return nil, nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s: %v", rel.Version, err)
	}
	objs, err := kustomize(rel, instance, swa.Namespace, swa.Name, patches)
	if err != nil {
		return nil, nil, err
	}
	if err := checkBuilt(rel, objs, swa.Namespace); err != nil {
		return nil, nil, err
	}
	return objs, instance, nil
}

// kustomize renders the package for an instance document (instance.yaml)
// with the overlay for namespace, name and patches.
func kustomize(rel Release, instance map[string]any, namespace, name string, patches []webappv1.Patch) ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	if err := copyPackage(rel.Files, mem, "/package"); err != nil {
		return nil, fmt.Errorf("loading package %s: %w", rel.Version, err)
	}
	instanceYAML, err := yaml.Marshal(instance)
	if err != nil {
		return nil, err
	}
	if err := mem.WriteFile("/package/"+instanceFile, instanceYAML); err != nil {
		return nil, err
	}
	overlay, err := yaml.Marshal(overlayFor(namespace, name, patches))
	if err != nil {
		return nil, err
	}
	if err := mem.WriteFile("/overlay/kustomization.yaml", overlay); err != nil {
		return nil, err
	}

	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy // ConfigMaps before the Deployment that mounts them
	resources, err := krusty.MakeKustomizer(opts).Run(mem, "/overlay")
	if err != nil {
		return nil, step.Stalled(webappv1.ReasonRenderFailed, "rendering package %s: %v", rel.Version, err)
	}
	if resources.Size() > maxRenderedObjects {
		return nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s renders %d objects, more than the limit of %d", rel.Version, resources.Size(), maxRenderedObjects)
	}
	objs := make([]*unstructured.Unstructured, 0, resources.Size())
	size := 0
	for _, res := range resources.Resources() {
		// Through JSON, so numbers are int64/float64 as in any unstructured
		// object (kustomize's maps hold plain ints, which DeepCopy rejects).
		b, err := res.MarshalJSON()
		if err != nil {
			return nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s: %v", rel.Version, err)
		}
		if size += len(b); size > maxRenderedBytes {
			return nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s renders more than the limit of %d KiB", rel.Version, maxRenderedBytes>>10)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s: %v", rel.Version, err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// checkBuilt: everything lands in the SimpleWebApp's namespace.
func checkBuilt(rel Release, objs []*unstructured.Unstructured, namespace string) error {
	for _, u := range objs {
		if u.GetNamespace() != namespace {
			return step.Stalled(webappv1.ReasonRenderFailed, "package %s renders %s %s outside namespace %s", rel.Version, u.GetKind(), u.GetName(), namespace)
		}
	}
	return nil
}

// overlayFor is the per-object layer on top of the package: where the objects
// go, how they are named and labelled, and the user's patches.
func overlayFor(namespace, name string, patches []webappv1.Patch) kustypes.Kustomization {
	k := kustypes.Kustomization{
		TypeMeta:   kustypes.TypeMeta{APIVersion: kustypes.KustomizationVersion, Kind: kustypes.KustomizationKind},
		Resources:  []string{"../package"},
		Namespace:  namespace,
		NamePrefix: name + "-",
		Labels: []kustypes.Label{
			{Pairs: map[string]string{LabelInstance: name}, IncludeSelectors: true},
			{Pairs: map[string]string{LabelManagedBy: ManagerName}},
		},
	}
	for _, p := range patches {
		k.Patches = append(k.Patches, kustypes.Patch{
			Patch: p.Patch, // prepared: JSON with an object header
			// Kinds are limited by the API to Deployment and Service.
			Target: &kustypes.Selector{ResId: resid.ResId{Gvk: resid.Gvk{Kind: p.Target.Kind}, Name: p.Target.Name}},
		})
	}
	return k
}

// instanceFor lays the SimpleWebApp's spec over the package's instance.yaml,
// which holds a default for every field the package maps, so the package's
// replacements always find their source.
func instanceFor(pkg fs.FS, swa *webappv1.SimpleWebApp) (map[string]any, error) {
	raw, err := fs.ReadFile(pkg, instanceFile)
	if err != nil {
		return nil, fmt.Errorf("package has no %s: %w", instanceFile, err)
	}
	var instance map[string]any
	if err := yaml.Unmarshal(raw, &instance); err != nil {
		return nil, fmt.Errorf("%s: %w", instanceFile, err)
	}
	spec, _ := instance["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
	}
	userSpec := swa.Spec.DeepCopy()
	userSpec.Patches = nil // applied by the overlay, not mapped by the package
	b, err := json.Marshal(userSpec)
	if err != nil {
		return nil, err
	}
	var user map[string]any
	if err := json.Unmarshal(b, &user); err != nil {
		return nil, err
	}
	for k, v := range user {
		spec[k] = v
	}
	instance["spec"] = spec
	meta, _ := instance["metadata"].(map[string]any)
	if meta == nil {
		return nil, fmt.Errorf("%s has no metadata", instanceFile)
	}
	meta["name"] = swa.Name
	meta["namespace"] = swa.Namespace
	return instance, nil
}

func copyPackage(src fs.FS, dst filesys.FileSystem, root string) error {
	return fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return dst.WriteFile(path.Join(root, p), b)
	})
}
