package render

import (
	"context"
	"fmt"
	"testing"
	"testing/fstest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
)

func packageVersions(t *testing.T) []Release {
	t.Helper()
	var rels []Release
	for _, v := range []string{"1.0.0", "1.1.0"} {
		rel, err := Channels{FS: channels.FS}.Resolve(context.Background(), webappv1.SimpleWebAppSpec{Version: v})
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	return rels
}

func renderedText(t *testing.T, r *Rendered) string {
	t.Helper()
	b, err := marshalRendered(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A render from a template is the render kustomize makes, for every package
// version, for names, namespaces and messages that collide with each other
// and with the package's own names, with patches and autoscaling.
func TestTemplatesRenderAsKustomize(t *testing.T) {
	specs := []webappv1.SimpleWebAppSpec{
		{Message: "hello"},
		{Replicas: new(int32(3)), Message: "web"},
		{Replicas: new(int32(2)), Message: "a-web-content: see ns-1/a, and a.b_c:d/e@f"},
		{Message: ""},
		{Message: "007"},
		{Message: "true"},
		{Message: "hello", Image: "registry.example/web:1.2.3"},
		{Message: "hello", Autoscaling: &webappv1.Autoscaling{MinReplicas: 2, MaxReplicas: 5}},
		{Message: "patched", Patches: []webappv1.Patch{
			dep(`{"spec": {"template": {"metadata": {"annotations": {"note": "a-web"}}}}}`),
			svc(`{"metadata": {"annotations": {"owner": "web"}}}`),
		}},
	}
	ids := []struct{ namespace, name string }{{"demo", "a"}, {"demo", "web"}, {"ns-1", "a"}, {"ns-1", "a-web"}, {"default", "hello"}}
	for _, rel := range packageVersions(t) {
		templates := newTemplates(8<<20, nil)
		for i, spec := range specs {
			for _, id := range ids {
				t.Run(fmt.Sprintf("%s/spec%d/%s/%s", rel.Version, i, id.namespace, id.name), func(t *testing.T) {
					swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: id.name, Namespace: id.namespace}, Spec: spec}
					want, werr := Render(rel, swa)
					got, gerr := render(rel, swa, templates)
					if (werr == nil) != (gerr == nil) {
						t.Fatalf("kustomize: %v; template: %v", werr, gerr)
					}
					if werr != nil {
						if werr.Error() != gerr.Error() {
							t.Fatalf("errors differ:\n%v\n%v", werr, gerr)
						}
						return
					}
					if w, g := renderedText(t, want), renderedText(t, got); w != g {
						t.Fatalf("renders differ:\nkustomize: %s\ntemplate: %s", w, g)
					}
				})
			}
		}
		if !templates.checked[mustPackageHash(t, rel)] {
			t.Errorf("package %s was not rendered from templates", rel.Version)
		}
	}
}

func mustPackageHash(t *testing.T, rel Release) string {
	t.Helper()
	h, err := PackageHash(rel.Files)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// SimpleWebApps that differ in name, namespace and message share one
// kustomize run; a new number in the spec is a new template.
func TestTemplatesShareKustomizeRuns(t *testing.T) {
	rel := stableRelease(t)
	templates := newTemplates(8<<20, nil)
	render := func(name, message string, replicas int32) {
		t.Helper()
		swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns-" + name},
			Spec: webappv1.SimpleWebAppSpec{Replicas: &replicas, Message: message}}
		if _, err := render(rel, swa, templates); err != nil {
			t.Fatal(err)
		}
	}
	render("first", "hello", 3)
	afterFirst := templates.kustomizeRuns.Load()
	for i := range 20 {
		render(fmt.Sprintf("app-%d", i), fmt.Sprintf("message %d", i), 3)
	}
	if runs := templates.kustomizeRuns.Load(); runs != afterFirst {
		t.Errorf("20 more SimpleWebApps of one shape ran kustomize %d more times, want 0", runs-afterFirst)
	}
	render("other", "hello", 5)
	if runs := templates.kustomizeRuns.Load(); runs != afterFirst+1 {
		t.Errorf("a new replica count ran kustomize %d times, want 1", runs-afterFirst)
	}
}

// A package that uses a value other than verbatim (here it splits the name
// or the message) fails the check: every render of it is kustomize's.
func TestTemplatesRefusePackagesThatSplitValues(t *testing.T) {
	for _, source := range []string{
		`{kind: SimpleWebApp, fieldPath: metadata.name, options: {delimiter: "-", index: 0}}`,
		`{kind: SimpleWebApp, fieldPath: spec.message, options: {delimiter: ":", index: 1}}`,
	} {
		t.Run(source, func(t *testing.T) {
			rel := Release{Version: "9.9.9", Files: fstest.MapFS{
				"instance.yaml": {Data: []byte(`apiVersion: example.com/v1
kind: SimpleWebApp
metadata:
  name: instance
  annotations:
    config.kubernetes.io/local-config: "true"
spec:
  message: "x:y"
`)},
				"cm.yaml": {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {part: x}\n")},
				"kustomization.yaml": {Data: []byte(`resources: [instance.yaml, cm.yaml]
replacements:
- source: ` + source + `
  targets:
  - select: {kind: ConfigMap}
    fieldPaths: [data.part]
`)},
			}}
			templates := newTemplates(8<<20, nil)
			swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "my-app", Namespace: "demo"},
				Spec: webappv1.SimpleWebAppSpec{Message: "left:right"}}
			want, _, err := kustomizer{}.build(rel, swa, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := templates.build(rel, swa, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameObjects(want, got); err != nil {
				t.Fatal(err)
			}
			if templates.checked[mustPackageHash(t, rel)] {
				t.Error("the package passed the check")
			}
		})
	}
}

// A template is kept only once the render it served passed the patch policy
// and the security floor: a render refused by either leaves none behind, so
// a tenant's refused patches cost the cache nothing. An accepted render keeps
// its templates, and the next SimpleWebApp of its shape renders from them.
func TestTemplatesKeptOnlyForAcceptedRenders(t *testing.T) {
	hostNetwork := dep("spec:\n  template:\n    spec:\n      hostNetwork: true\n")
	limits := dep("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        resources:\n          limits: {memory: 64Mi}\n")
	for _, tc := range []struct {
		name   string
		rel    Release
		reason string
	}{
		{"refused by the patch policy", stableRelease(t), webappv1.ReasonPatchNotAllowed},
		{"refused by the security floor", permissive(t), webappv1.ReasonPolicyViolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			templates := newTemplates(8<<20, nil)
			swa := func(name string, patches ...webappv1.Patch) *webappv1.SimpleWebApp {
				return &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
					Spec: webappv1.SimpleWebAppSpec{Message: name, Patches: patches}}
			}
			_, err := render(tc.rel, swa("refused", hostNetwork), templates)
			if reasonOf(err) != tc.reason {
				t.Fatalf("render with hostNetwork: %v, want %s", err, tc.reason)
			}
			// One: the package's render without patches, which the patch
			// policy compared it with; nothing of the refused patches.
			if n := templates.kept.Len(); n != 1 {
				t.Fatalf("a refused render left %d templates, want only the one without patches", n)
			}
			// Refused again: its patches rendered by kustomize again (no
			// template of them was kept), the package's render from its
			// template.
			before := templates.kustomizeRuns.Load()
			if _, err := render(tc.rel, swa("refused-again", hostNetwork), templates); reasonOf(err) != tc.reason {
				t.Fatalf("render with hostNetwork again: %v, want %s", err, tc.reason)
			}
			if runs := templates.kustomizeRuns.Load() - before; runs != 1 {
				t.Fatalf("a refused render's second time ran kustomize %d times, want 1", runs)
			}
			if _, err := render(tc.rel, swa("accepted", limits), templates); err != nil {
				t.Fatal(err)
			}
			// Two: the render with its patches, and the one without them that
			// the patch policy compares it with (kept before).
			if n, b := templates.kept.Len(), templates.kept.Bytes(); n != 2 || b == 0 {
				t.Fatalf("an accepted render kept %d templates (%d bytes), want 2", n, b)
			}
			runs := templates.kustomizeRuns.Load()
			if _, err := render(tc.rel, swa("same-shape", limits), templates); err != nil {
				t.Fatal(err)
			}
			if more := templates.kustomizeRuns.Load() - runs; more != 0 {
				t.Errorf("a SimpleWebApp of the accepted one's shape ran kustomize %d times, want 0", more)
			}
		})
	}
}
