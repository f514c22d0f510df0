// Package golden renders every package version of every channel for a set of
// SimpleWebApps and compares the objects with files under testdata/. After a
// deliberate change to channels/, rewrite them with `make golden` (-update).
package golden

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func loadCases(t *testing.T) map[string]*webappv1.SimpleWebApp {
	t.Helper()
	files, err := filepath.Glob("testdata/cases/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	cases := map[string]*webappv1.SimpleWebApp{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		swa := &webappv1.SimpleWebApp{}
		if err := yaml.UnmarshalStrict(raw, swa); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		swa.Namespace = "demo"
		cases[strings.TrimSuffix(filepath.Base(f), ".yaml")] = swa
	}
	return cases
}

func TestRenderEveryVersion(t *testing.T) {
	src := render.Channels{FS: channels.FS}
	versions := testkit.Versions(t)
	for _, version := range versions {
		for name, swa := range loadCases(t) {
			t.Run(version+"/"+name, func(t *testing.T) {
				swa := swa.DeepCopy()
				swa.Spec.Version = version
				rel, err := src.Resolve(context.Background(), swa.Spec)
				if err != nil {
					t.Fatal(err)
				}
				rendered, err := render.Render(rel, swa)
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				for _, o := range rendered.Objects {
					b, err := yaml.Marshal(o.Object)
					if err != nil {
						t.Fatal(err)
					}
					out.WriteString("---\n")
					out.Write(b)
				}
				for _, o := range rendered.Handoffs {
					b, err := yaml.Marshal(o.Object)
					if err != nil {
						t.Fatal(err)
					}
					out.WriteString("--- # fields applied by " + apply.HandoffManager + "\n")
					out.Write(b)
				}
				compare(t, filepath.Join("testdata", version, name+".yaml"), out.Bytes())
			})
		}
	}
	// No golden files of a version that is gone.
	dirs, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && d.Name() != "cases" && !slices.Contains(versions, d.Name()) {
			t.Errorf("testdata/%s: no such package version (versions %v); remove it", d.Name(), versions)
		}
	}
}

// Every channel resolves to a version that renders, and the tests' reading
// of the channel files (testkit.ChannelVersion) agrees with the operator's.
func TestEveryChannelResolves(t *testing.T) {
	for _, name := range testkit.ChannelNames(t) {
		rel, err := render.Channels{FS: channels.FS}.Resolve(context.Background(), webappv1.SimpleWebAppSpec{Channel: name})
		if err != nil {
			t.Errorf("channel %s: %v", name, err)
			continue
		}
		if want := testkit.ChannelVersion(t, name); rel.Version != want {
			t.Errorf("channel %s: the operator resolves %s, testkit.ChannelVersion says %s", name, rel.Version, want)
		}
		swa := &webappv1.SimpleWebApp{}
		swa.Name, swa.Namespace = "x", "demo"
		if _, err := render.Render(rel, swa); err != nil {
			t.Errorf("channel %s version %s: %v", name, rel.Version, err)
		}
	}
}

// The defaults each package fills in (instance.yaml) must equal the CRD's, so
// what the API server stores and what the package renders agree.
func TestPackageDefaultsMatchCRD(t *testing.T) {
	raw, err := os.ReadFile("../../config/crd/bases/example.com_simplewebapps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties
	for _, version := range testkit.Versions(t) {
		raw, err := fs.ReadFile(channels.FS, "packages/"+render.PackageName+"/"+version+"/instance.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var instance struct {
			Spec map[string]any `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &instance); err != nil {
			t.Fatal(err)
		}
		for field, prop := range props {
			// channel and upgradeTimeout steer the operator; packages do not map them.
			if prop.Default == nil || field == "channel" || field == "upgradeTimeout" {
				continue
			}
			want := strings.TrimSpace(string(prop.Default.Raw))
			gotJSON, _ := yaml.Marshal(instance.Spec[field])
			got, _ := yaml.YAMLToJSON(gotJSON)
			if strings.TrimSpace(string(got)) != want {
				t.Errorf("package %s: instance.yaml spec.%s = %s, CRD default = %s", version, field, got, want)
			}
		}
	}
}

func compare(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `make golden` to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("render differs from %s (run `make golden` after a deliberate change):\n%s", path, diff(string(want), string(got)))
	}
}

// diff shows the first differing lines; enough to see what moved.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, wl, gl)
		}
	}
	return ""
}
