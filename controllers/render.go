package controllers

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// Labels the render puts on every object. The instance label is part of the
// selectors, so two SimpleWebApps in one namespace never share pods.
const (
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagerName    = "simplewebapp-operator"
)

// instanceFile is where the package reads the SimpleWebApp being rendered.
const instanceFile = "instance.yaml"

// Rendered is what the operator applies for one SimpleWebApp.
type Rendered struct {
	// Objects are applied as one ApplySet by ManagerName.
	Objects []*unstructured.Unstructured
	// Handoffs are partial objects with the fields that the package hands
	// off under a condition which is false now: applied as HandoffManager.
	Handoffs []*unstructured.Unstructured
}

// Render builds the objects of one SimpleWebApp from a package version. It is
// a pure function of (package files, object identity, spec): kustomize runs in
// memory, and all spec-to-manifest mapping is declared inside the package.
func Render(rel Release, swa *webappv1.SimpleWebApp) (*Rendered, error) {
	objs, err := build(rel, swa, swa.Spec.Patches)
	if err != nil || len(swa.Spec.Patches) == 0 {
		return objs, err
	}
	// Patches may only modify what the package renders: the same objects,
	// names, namespaces and kinds must come out with and without them.
	unpatched, err := build(rel, swa, nil)
	if err != nil {
		return nil, err
	}
	if got, want := identities(objs.Objects), identities(unpatched.Objects); got != want {
		return nil, stalled(ReasonPatchNotAllowed,
			"spec.patches may only modify rendered objects, not add, rename or move them: renders %s instead of %s", got, want)
	}
	return objs, nil
}

func build(rel Release, swa *webappv1.SimpleWebApp, patches []webappv1.Patch) (*Rendered, error) {
	mem := filesys.MakeFsInMemory()
	if err := copyPackage(rel.Files, mem, "/package"); err != nil {
		return nil, fmt.Errorf("loading package %s: %w", rel.Version, err)
	}
	instance, err := instanceFor(rel.Files, swa)
	if err != nil {
		return nil, stalled(ReasonRenderFailed, "package %s: %v", rel.Version, err)
	}
	instanceYAML, err := yaml.Marshal(instance)
	if err != nil {
		return nil, err
	}
	if err := mem.WriteFile("/package/"+instanceFile, instanceYAML); err != nil {
		return nil, err
	}
	overlay, err := yaml.Marshal(overlayFor(swa, patches))
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
		return nil, stalled(ReasonRenderFailed, "rendering package %s: %v", rel.Version, err)
	}
	objs := make([]*unstructured.Unstructured, 0, resources.Size())
	for _, res := range resources.Resources() {
		// Through JSON, so numbers are int64/float64 as in any unstructured
		// object (kustomize's maps hold plain ints, which DeepCopy rejects).
		b, err := res.MarshalJSON()
		if err != nil {
			return nil, stalled(ReasonRenderFailed, "package %s: %v", rel.Version, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, stalled(ReasonRenderFailed, "package %s: %v", rel.Version, err)
		}
		if u.GetNamespace() != swa.Namespace {
			return nil, stalled(ReasonRenderFailed, "package %s renders %s %s outside namespace %s", rel.Version, u.GetKind(), u.GetName(), swa.Namespace)
		}
		objs = append(objs, u)
	}
	return applyDirectives(rel.Version, objs, instance)
}

// overlayFor is the per-object layer on top of the package: where the objects
// go, how they are named and labelled, and the user's patches.
func overlayFor(swa *webappv1.SimpleWebApp, patches []webappv1.Patch) kustypes.Kustomization {
	k := kustypes.Kustomization{
		TypeMeta:   kustypes.TypeMeta{APIVersion: kustypes.KustomizationVersion, Kind: kustypes.KustomizationKind},
		Resources:  []string{"../package"},
		Namespace:  swa.Namespace,
		NamePrefix: swa.Name + "-",
		Labels: []kustypes.Label{
			{Pairs: map[string]string{LabelInstance: swa.Name}, IncludeSelectors: true},
			{Pairs: map[string]string{LabelManagedBy: ManagerName}},
		},
	}
	for _, p := range patches {
		k.Patches = append(k.Patches, kustypes.Patch{
			Patch: withObjectHeader(p),
			// Kinds are limited by the API to Deployment and Service.
			Target: &kustypes.Selector{ResId: resid.ResId{Gvk: resid.Gvk{Kind: p.Target.Kind}, Name: p.Target.Name}},
		})
	}
	return k
}

// patchableAPIVersions are the kinds spec.patches may target (an API enum).
var patchableAPIVersions = map[string]string{"Deployment": "apps/v1", "Service": "v1"}

// withObjectHeader lets users write a strategic merge patch as just the fields
// to change: kustomize needs apiVersion, kind and a name to parse one, and with
// a target it replaces them with each matched object's. JSON 6902 patches (a
// list) pass unchanged.
func withObjectHeader(p webappv1.Patch) string {
	var body map[string]any
	if err := yaml.Unmarshal([]byte(p.Patch), &body); err != nil || body == nil {
		return p.Patch
	}
	if _, ok := body["kind"]; ok {
		return p.Patch
	}
	body["apiVersion"] = patchableAPIVersions[p.Target.Kind]
	body["kind"] = p.Target.Kind
	if _, ok := body["metadata"]; !ok {
		body["metadata"] = map[string]any{"name": "patched"}
	} else if m, ok := body["metadata"].(map[string]any); ok && m["name"] == nil {
		m["name"] = "patched"
	}
	out, err := yaml.Marshal(body)
	if err != nil {
		return p.Patch
	}
	return string(out)
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

// identities lists group/kind/namespace/name of the objects, sorted, as text.
func identities(objs []*unstructured.Unstructured) string {
	ids := make([]string, 0, len(objs))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		ids = append(ids, fmt.Sprintf("%s/%s %s/%s", gvk.Group, gvk.Kind, o.GetNamespace(), o.GetName()))
	}
	sort.Strings(ids)
	return fmt.Sprint(ids)
}
