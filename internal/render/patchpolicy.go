package render

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// patchPolicyFile is the package file that says what spec.patches may change.
// A package without one lets patches change nothing.
const patchPolicyFile = "patch-policy.yaml"

// reservedKeyPrefixes are label and annotation keys a patch may never set:
// the operator's and its tools' own bookkeeping and directives.
var reservedKeyPrefixes = []string{
	"simplewebapp.example.com/", "addons.k8s.io/", "applyset.kubernetes.io/",
	"config.kubernetes.io/", "internal.config.kubernetes.io/", "config.k8s.io/", "kustomize.config.k8s.io/",
}

// patchPolicy is a package's patch-policy.yaml.
type patchPolicy struct {
	// Patchable maps a kind to the paths a patch may change in its objects:
	// dot-separated from the object's root, "[*]" for every element of a
	// list, e.g. spec.template.spec.containers[*].resources. A path covers
	// everything below it. Under a labels or annotations map a patch may
	// only add keys the package does not set, outside the reserved prefixes,
	// that MetadataKeys allows.
	Patchable map[string][]string `json:"patchable"`
	// MetadataKeys are the label and annotation keys a patch may add. None
	// when the package lists none: other objects select and act on labels
	// and annotations, so a package names the keys that are its users'.
	MetadataKeys metadataKeys `json:"metadataKeys"`
	// TolerationKeys are the taint keys a patch may add tolerations of
	// (where the tolerations are patchable). None when the package lists
	// none. The security floor refuses some whatever this lists.
	TolerationKeys []string `json:"tolerationKeys"`
}

// metadataKeys allows label and annotation keys by prefix (a domain and its
// slash, e.g. "user.simplewebapp.example.com/") or whole. Whatever it
// allows, the security floor refuses unprefixed keys and keys in
// Kubernetes' and well-known controllers' domains.
type metadataKeys struct {
	Prefixes []string `json:"prefixes"`
	Keys     []string `json:"keys"`
}

func (m metadataKeys) allows(key string) bool {
	if slices.Contains(m.Keys, key) {
		return true
	}
	for _, p := range m.Prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func (m metadataKeys) describe() string {
	var parts []string
	if len(m.Prefixes) > 0 {
		parts = append(parts, "with the prefixes "+strings.Join(quoteAll(m.Prefixes), ", "))
	}
	if len(m.Keys) > 0 {
		parts = append(parts, "the keys "+strings.Join(quoteAll(m.Keys), ", "))
	}
	if len(parts) == 0 {
		return "none (patch-policy.yaml lists no metadataKeys)"
	}
	return strings.Join(parts, " and ")
}

func quoteAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func loadPatchPolicy(rel Release) (*patchPolicy, error) {
	raw, err := fs.ReadFile(rel.Files, patchPolicyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return &patchPolicy{}, nil
	}
	if err != nil {
		return nil, err
	}
	p := &patchPolicy{}
	if err := yaml.UnmarshalStrict(raw, p); err != nil {
		return nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s: %s: %v", rel.Version, patchPolicyFile, err)
	}
	return p, nil
}

// check compares the render without patches (base) with the render with
// them (patched): the same objects must come out, and every difference must
// be one the policy allows. The first difference that is not is the error.
func (p *patchPolicy) check(base, patched []*unstructured.Unstructured) error {
	if got, want := identities(patched), identities(base); !slices.Equal(got, want) {
		return step.Stalled(webappv1.ReasonPatchNotAllowed,
			"spec.patches may only modify rendered objects, not add, rename or move them: renders %v instead of %v", got, want)
	}
	byID := map[string]*unstructured.Unstructured{}
	for _, o := range base {
		byID[Identity(o)] = o
	}
	for _, o := range patched {
		b := byID[Identity(o)]
		for _, d := range diff(nil, b.Object, o.Object) {
			if ok, why := p.allows(o.GetKind(), d); !ok {
				return step.Stalled(webappv1.ReasonPatchNotAllowed, "spec.patches may not change %s %s: %s (%s); the package lets patches change: %s",
					o.GetKind(), o.GetName(), d.path(), why, p.describe(o.GetKind()))
			}
		}
		if key, ok := p.addedToleration(b, o); !ok {
			tolerable := "none (patch-policy.yaml lists no tolerationKeys)"
			if len(p.TolerationKeys) > 0 {
				tolerable = strings.Join(quoteAll(p.TolerationKeys), ", ")
			}
			return step.Stalled(webappv1.ReasonPatchNotAllowed, "spec.patches may not add a toleration of the taint key %q to %s %s; the package lets patches tolerate the taint keys: %s",
				key, o.GetKind(), o.GetName(), tolerable)
		}
	}
	return nil
}

// addedToleration finds a toleration in patched's pod template whose key
// neither the package's own render (base) tolerates nor TolerationKeys
// lists: its key and false, or "" and true.
func (p *patchPolicy) addedToleration(base, patched *unstructured.Unstructured) (string, bool) {
	path := []string{"spec", "template", "spec", "tolerations"}
	keys := func(o *unstructured.Unstructured) []string {
		l, _, _ := unstructured.NestedSlice(o.Object, path...)
		var out []string
		for _, t := range l {
			m, _ := t.(map[string]any)
			k, _ := m["key"].(string)
			out = append(out, k)
		}
		return out
	}
	packages := keys(base)
	for _, k := range keys(patched) {
		if !slices.Contains(packages, k) && !slices.Contains(p.TolerationKeys, k) {
			return k, false
		}
	}
	return "", true
}

// allows says whether a difference is allowed, and if not, why.
func (p *patchPolicy) allows(kind string, d difference) (bool, string) {
	segs := d.segments
	// A key of a labels or annotations map (metadata.labels.x,
	// spec.template.metadata.annotations.y).
	if n := len(segs); n >= 3 && segs[n-3] == "metadata" && (segs[n-2] == "labels" || segs[n-2] == "annotations") {
		key := segs[n-1]
		for _, prefix := range reservedKeyPrefixes {
			if strings.HasPrefix(key, prefix) {
				return false, "reserved prefix " + prefix
			}
		}
		if d.before != nil {
			return false, "the package sets this key; patches may only add keys"
		}
		if !p.MetadataKeys.allows(key) {
			return false, "the package lets patches add label and annotation keys " + p.MetadataKeys.describe()
		}
	} else if len(segs) > 0 && segs[0] == "metadata" {
		// Finalizers, owner references, names, namespaces: reserved, whatever
		// a package allows.
		return false, "reserved: under metadata patches may only add labels and annotations"
	}
	for _, pattern := range p.Patchable[kind] {
		if covers(strings.Split(pattern, "."), segs) {
			return true, ""
		}
	}
	return false, "not patchable"
}

func (p *patchPolicy) describe(kind string) string {
	if len(p.Patchable[kind]) == 0 {
		return "nothing"
	}
	return strings.Join(p.Patchable[kind], ", ")
}

// covers reports whether a pattern (with "[*]" list elements written as
// "name[*]") covers a path: the pattern is a prefix of it.
func covers(pattern, segs []string) bool {
	var want []string
	for _, p := range pattern {
		if name, ok := strings.CutSuffix(p, "[*]"); ok {
			want = append(want, name, "[*]")
			continue
		}
		want = append(want, p)
	}
	if len(want) > len(segs) {
		return false
	}
	for i, w := range want {
		if w == "[*]" && strings.HasPrefix(segs[i], "[") {
			continue
		}
		if w != segs[i] {
			return false
		}
	}
	return true
}

// difference is one place where two objects differ.
type difference struct {
	segments      []string // map keys, and "[name=x]" or "[i]" for list elements
	before, after any
}

func (d difference) path() string {
	var b strings.Builder
	for i, s := range d.segments {
		if i > 0 && !strings.HasPrefix(s, "[") {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// diff lists where a and b differ, as deep as both are maps or lists. A
// missing map or list counts as empty, so adding a key shows as the key.
// Elements of lists of named objects (containers, ports, volumes, env) are
// matched by name.
func diff(at []string, a, b any) []difference {
	here := func() []string { return slices.Clone(at) }
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if (aIsMap || a == nil) && (bIsMap || b == nil) && (aIsMap || bIsMap) {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		var out []difference
		for _, k := range sorted {
			out = append(out, diff(append(here(), k), am[k], bm[k])...)
		}
		return out
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if (aIsList || a == nil) && (bIsList || b == nil) && (aIsList || bIsList) {
		if an, bn := names(al), names(bl); an != nil && bn != nil {
			var out []difference
			for _, n := range mergedNames(an, bn) {
				out = append(out, diff(append(here(), "[name="+n+"]"), byName(al, n), byName(bl, n))...)
			}
			return out
		}
		if len(al) != len(bl) {
			return []difference{{segments: here(), before: a, after: b}}
		}
		var out []difference
		for i := range al {
			out = append(out, diff(append(here(), fmt.Sprintf("[%d]", i)), al[i], bl[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(a, b) {
		return []difference{{segments: here(), before: a, after: b}}
	}
	return nil
}

// names returns the "name" of every element, or nil unless every element is
// a map with a distinct string name.
func names(l []any) []string {
	out := make([]string, 0, len(l))
	seen := map[string]bool{}
	for _, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return nil
		}
		n, ok := m["name"].(string)
		if !ok || seen[n] {
			return nil
		}
		seen[n] = true
		out = append(out, n)
	}
	return out
}

func mergedNames(a, b []string) []string {
	out := slices.Clone(a)
	for _, n := range b {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func byName(l []any, name string) any {
	for _, e := range l {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	return nil
}
