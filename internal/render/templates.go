package render

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/kustomize/api/hasher"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// templates run kustomize once per package and spec shape instead of
// once per SimpleWebApp. Kustomize is most of a render's cost in CPU and
// garbage (docs/benchmarks.md), and SimpleWebApps of one package differ mostly in
// their name, namespace and strings of their spec (a message).
//
// A template is the package rendered for an instance whose name, namespace
// and every non-empty string of the spec are sentinels: random tokens of this
// process, which nothing a user writes can contain. A SimpleWebApp's render
// is the template with each sentinel replaced by its value, and the content
// hash in generated names (kustomize's configMapGenerator) computed again,
// with kustomize's own hasher, for the content they end up with. The key is
// the package's files, the spec with its strings masked (numbers, booleans
// and patches are part of it) and the patches.
//
// That equals kustomize's output only if the package uses these values
// verbatim: as a whole or inside a string, as namePrefix, namespace, labels
// and replacements do. A package that splits them (a replacement with
// options.delimiter), hashes anything but its generated ConfigMaps and
// Secrets, or orders objects by them would not. So each package version is
// checked once, before its first template: rendered both ways for names,
// namespaces and strings full of delimiters, it must come out the same, or
// every SimpleWebApp of that version is rendered by kustomize as before.
// Render itself (golden tests, `kubectl swa render`) never uses templates; a
// test checks both give the same objects.
//
// A template is kept only once the render it served passed the patch policy
// and the security floor (stage), so a tenant's refused patches cost the
// cache nothing.
type templates struct {
	token string
	kept  *byteLRU[*renderTemplate] // key → template

	mu      sync.Mutex
	checked map[string]bool // package hash → renders the same from templates

	// kustomizeRuns counts kustomize runs (for tests).
	kustomizeRuns atomic.Int64
}

// newTemplates keeps at most budget bytes of templates (renderTemplate.size),
// telling g how many bytes it holds (g may be nil).
func newTemplates(budget int64, g gauge) *templates {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	// Lowercase letters and digits, starting with a letter: a valid name,
	// label value and namespace, and a plain YAML string.
	return &templates{token: "t" + hex.EncodeToString(b), kept: newByteLRU[*renderTemplate](budget, g), checked: map[string]bool{}}
}

type renderTemplate struct {
	objects [][]byte // JSON, sentinels in place
	// hashed are the objects whose name ends in a hash of their content.
	hashed []int
}

// size is what a template under key costs the cache: its objects' JSON and
// the key, which holds the masked spec and the patches.
func (tpl *renderTemplate) size(key string) int64 {
	n := len(key)
	for _, b := range tpl.objects {
		n += len(b)
	}
	return int64(n)
}

// stage returns the builder for one render and commit, which keeps the
// templates that builder rendered (render calls it once the render passed
// its checks).
func (t *templates) stage() (builder, func()) {
	p := &templatePass{templates: t}
	return p, p.commit
}

// build builds in a pass of its own, which keeps no template: render keeps
// them through stage.
func (t *templates) build(rel Release, swa *webappv1.SimpleWebApp, patches []webappv1.Patch) ([]*unstructured.Unstructured, map[string]any, error) {
	p, _ := t.stage()
	return p.build(rel, swa, patches)
}

// templatePass is one render's use of templates: the templates it renders
// wait in pending, where its later builds find them, until commit.
type templatePass struct {
	*templates
	pending []pendingTemplate
}

type pendingTemplate struct {
	key string
	tpl *renderTemplate
}

func (t *templatePass) commit() {
	for _, p := range t.pending {
		t.kept.Add(p.key, p.tpl, p.tpl.size(p.key))
	}
	t.pending = nil
}

// build is kustomizer.build, from a template when the package allows.
// Whatever goes wrong with a template, the plain build decides (and its
// errors name the SimpleWebApp's own values, not sentinels).
func (t *templatePass) build(rel Release, swa *webappv1.SimpleWebApp, patches []webappv1.Patch) ([]*unstructured.Unstructured, map[string]any, error) {
	instance, err := instanceFor(rel.Files, swa)
	if err != nil {
		return kustomizer{}.build(rel, swa, patches)
	}
	pkg, err := rel.PackageHash()
	if err != nil || !t.sameAsKustomize(rel, pkg) {
		return t.counted(rel, swa, patches)
	}
	objs, err := t.instantiate(rel, pkg, instance, swa.Namespace, swa.Name, patches)
	if err != nil {
		return t.counted(rel, swa, patches)
	}
	if err := checkBuilt(rel, objs, swa.Namespace); err != nil {
		return nil, nil, err
	}
	return objs, instance, nil
}

func (t *templatePass) counted(rel Release, swa *webappv1.SimpleWebApp, patches []webappv1.Patch) ([]*unstructured.Unstructured, map[string]any, error) {
	t.kustomizeRuns.Add(1)
	return kustomizer{}.build(rel, swa, patches)
}

// masked is an instance with sentinels, and what replaces them.
type masked struct {
	instance map[string]any
	values   []string // sentinel, value, sentinel, value...
}

func (t *templates) mask(instance map[string]any, namespace, name string) (masked, error) {
	var m masked
	b, err := json.Marshal(instance)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m.instance); err != nil {
		return m, err
	}
	meta, _ := m.instance["metadata"].(map[string]any)
	if meta == nil {
		return m, fmt.Errorf("%s has no metadata", instanceFile)
	}
	meta["name"], meta["namespace"] = t.token+"n0z", t.token+"s0z"
	m.values = append(m.values, t.token+"n0z", name, t.token+"s0z", namespace)
	// In key order: a template's sentinels are numbered the same for every
	// SimpleWebApp of its shape.
	sentinel := func(v string) string {
		// An empty string may mean "unset" to kustomize; it stays in the key.
		if v == "" {
			return v
		}
		s := fmt.Sprintf("%sv%dz", t.token, len(m.values)/2)
		m.values = append(m.values, s, v)
		return s
	}
	m.instance["spec"] = mapStrings(m.instance["spec"], sentinel, false)
	return m, nil
}

func (t *templatePass) instantiate(rel Release, pkg string, instance map[string]any, namespace, name string, patches []webappv1.Patch) ([]*unstructured.Unstructured, error) {
	m, err := t.mask(instance, namespace, name)
	if err != nil {
		return nil, err
	}
	tpl, err := t.template(rel, pkg, m, patches)
	if err != nil {
		return nil, err
	}
	values := strings.NewReplacer(m.values...)
	objs := make([]*unstructured.Unstructured, len(tpl.objects))
	for i, b := range tpl.objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, err
		}
		u.Object = replaceStrings(u.Object, values).(map[string]any)
		objs[i] = u
	}
	// Generated names end in a hash of the content they now hold; what
	// refers to them has the template's hash.
	var renames []string
	for _, i := range tpl.hashed {
		u := objs[i]
		n := u.GetName()
		base := n[:strings.LastIndex(n, "-")]
		h, err := contentHash(u, base)
		if err != nil {
			return nil, err
		}
		renames = append(renames, n, base+"-"+h)
	}
	if len(renames) > 0 {
		r := strings.NewReplacer(renames...)
		for _, u := range objs {
			u.Object = replaceStrings(u.Object, r).(map[string]any)
		}
	}
	// Values may be longer than their sentinels: the limit is checked again
	// (the plain build reports it).
	size := 0
	for _, u := range objs {
		b, err := u.MarshalJSON()
		if err != nil {
			return nil, err
		}
		if size += len(b); size > maxRenderedBytes {
			return nil, fmt.Errorf("renders more than %d KiB", maxRenderedBytes>>10)
		}
	}
	return objs, nil
}

// template returns the template for a masked instance, rendering it first if
// needed (with patches: kept once the pass commits).
func (t *templatePass) template(rel Release, pkg string, m masked, patches []webappv1.Patch) (*renderTemplate, error) {
	key, err := json.Marshal(struct {
		Package  string
		Instance map[string]any
		Patches  []webappv1.Patch
	}{pkg, m.instance, patches})
	if err != nil {
		return nil, err
	}
	for _, p := range t.pending {
		if p.key == string(key) {
			return p.tpl, nil
		}
	}
	if tpl, ok := t.kept.Get(string(key)); ok {
		return tpl, nil
	}
	t.kustomizeRuns.Add(1)
	meta := m.instance["metadata"].(map[string]any)
	objs, err := kustomize(rel, m.instance, meta["namespace"].(string), meta["name"].(string), patches)
	if err != nil {
		return nil, err
	}
	tpl := &renderTemplate{}
	for i, u := range objs {
		b, err := u.MarshalJSON()
		if err != nil {
			return nil, err
		}
		tpl.objects = append(tpl.objects, b)
		if hashedName(u) {
			tpl.hashed = append(tpl.hashed, i)
		}
	}
	if len(patches) == 0 {
		// The package's own render for a spec shape: what every
		// SimpleWebApp of that shape without patches renders from, and what a
		// patched render is compared with, so it is kept whatever the patches
		// next to it turn out to be.
		t.kept.Add(string(key), tpl, tpl.size(string(key)))
		return tpl, nil
	}
	t.pending = append(t.pending, pendingTemplate{string(key), tpl})
	return tpl, nil
}

// hashedName: the object's name is "<base>-<kustomize's hash of it named base>".
func hashedName(u *unstructured.Unstructured) bool {
	n := u.GetName()
	i := strings.LastIndex(n, "-")
	if i <= 0 {
		return false
	}
	h, err := contentHash(u, n[:i])
	return err == nil && h == n[i+1:]
}

// contentHash is kustomize's name suffix for u named base.
func contentHash(u *unstructured.Unstructured, base string) (string, error) {
	c := u.DeepCopy()
	c.SetName(base)
	node, err := kyaml.FromMap(c.Object)
	if err != nil {
		return "", err
	}
	return (&hasher.Hasher{}).Hash(node)
}

// replaceStrings replaces in every string and map key of v.
func replaceStrings(v any, r *strings.Replacer) any {
	return mapStrings(v, r.Replace, true)
}

// mapStrings returns v with f applied to every string in it (and to map keys
// if keys is set), visiting maps in key order.
func mapStrings(v any, f func(string) string, keys bool) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			e := mapStrings(v[k], f, keys)
			if keys {
				k = f(k)
			}
			out[k] = e
		}
		return out
	case []any:
		for i, e := range v {
			v[i] = mapStrings(e, f, keys)
		}
		return v
	case string:
		return f(v)
	}
	return v
}

// sameAsKustomize checks once per package that templates render it as
// kustomize does (see templates).
func (t *templatePass) sameAsKustomize(rel Release, pkg string) bool {
	t.mu.Lock()
	ok, done := t.checked[pkg]
	t.mu.Unlock()
	if done {
		return ok
	}
	err := t.check(rel, pkg)
	if err != nil {
		log.Log.WithName("render").Info("package renders differently from a template: kustomize renders every SimpleWebApp of it", "version", rel.Version, "reason", err.Error())
	}
	t.mu.Lock()
	t.checked[pkg] = err == nil
	t.mu.Unlock()
	return err == nil
}

// tricky is added to every string of the check's spec: delimiters a package
// could split a value on.
const tricky = "-a.b_c:d/e@f,g h+i=j~k"

func (t *templatePass) check(rel Release, pkg string) error {
	for _, id := range []struct{ namespace, name string }{
		{"a", "b"}, {"web", "web"}, {"ns-1.x", "my-app-2"},
	} {
		swa := &webappv1.SimpleWebApp{}
		swa.Name, swa.Namespace = id.name, id.namespace
		instance, err := instanceFor(rel.Files, swa)
		if err != nil {
			return err
		}
		instance["spec"] = mapStrings(instance["spec"], func(v string) string { return v + tricky + id.name }, false)
		want, err := kustomize(rel, instance, id.namespace, id.name, nil)
		if err != nil {
			return err
		}
		got, err := t.instantiate(rel, pkg, instance, id.namespace, id.name, nil)
		if err != nil {
			return err
		}
		if err := sameObjects(want, got); err != nil {
			return fmt.Errorf("for %s/%s: %w", id.namespace, id.name, err)
		}
	}
	return nil
}

func sameObjects(want, got []*unstructured.Unstructured) error {
	if len(want) != len(got) {
		return fmt.Errorf("%d objects instead of %d", len(got), len(want))
	}
	for i := range want {
		w, err := want[i].MarshalJSON()
		if err != nil {
			return err
		}
		g, err := got[i].MarshalJSON()
		if err != nil {
			return err
		}
		if string(w) != string(g) {
			return fmt.Errorf("%s %s differs", want[i].GetKind(), want[i].GetName())
		}
	}
	return nil
}
