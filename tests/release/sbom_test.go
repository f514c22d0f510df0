package release_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// cdx is what the test reads of the CycloneDX SBOM.
type cdx struct {
	BOMFormat    string `json:"bomFormat"`
	SpecVersion  string `json:"specVersion"`
	SerialNumber string `json:"serialNumber"`
	Version      int    `json:"version"`
	Metadata     struct {
		Timestamp string       `json:"timestamp"`
		Component cdxComponent `json:"component"`
	} `json:"metadata"`
	Components   []cdxComponent `json:"components"`
	Dependencies []struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	} `json:"dependencies"`
}

type cdxComponent struct {
	Type    string `json:"type"`
	BOMRef  string `json:"bom-ref"`
	Name    string `json:"name"`
	Version string `json:"version"`
	PURL    string `json:"purl"`
	Hashes  []struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	} `json:"hashes"`
}

// sbom: sbom.cdx.json is CycloneDX 1.5 JSON with a UUID serial number and
// the release's time; it lists every released binary with its SHA-256 (the
// very binaries of the archives and images) and, as its dependencies, the
// Go modules linked into it at the versions go.mod selects, client-go and
// controller-runtime among them.
func (r *releaseDir) sbom(t *testing.T) {
	var doc cdx
	if err := json.Unmarshal(r.file(t, "sbom.cdx.json"), &doc); err != nil {
		t.Fatalf("sbom.cdx.json: %v", err)
	}
	if doc.BOMFormat != "CycloneDX" || doc.SpecVersion != "1.5" || doc.Version != 1 {
		t.Errorf("bomFormat %q specVersion %q version %d", doc.BOMFormat, doc.SpecVersion, doc.Version)
	}
	if !regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(doc.SerialNumber) {
		t.Errorf("serialNumber %q is not a name-based (version 5) UUID URN", doc.SerialNumber)
	}
	if ts, err := time.Parse(time.RFC3339, doc.Metadata.Timestamp); err != nil || !ts.Equal(r.epoch) {
		t.Errorf("timestamp %q (%v), want the release's time %s", doc.Metadata.Timestamp, err, r.epoch.Format(time.RFC3339))
	}
	if c := doc.Metadata.Component; c.Name != "simplewebapp-operator" || c.Version != version || c.Type != "application" {
		t.Errorf("metadata.component %+v", c)
	}

	refs := map[string]cdxComponent{doc.Metadata.Component.BOMRef: doc.Metadata.Component}
	var apps []string
	for _, c := range doc.Components {
		if c.BOMRef == "" || c.Name == "" {
			t.Errorf("component without bom-ref or name: %+v", c)
		}
		if _, dup := refs[c.BOMRef]; dup {
			t.Errorf("bom-ref %s twice", c.BOMRef)
		}
		refs[c.BOMRef] = c
		switch c.Type {
		case "application":
			apps = append(apps, c.BOMRef)
			bin, ok := r.binaries[c.BOMRef]
			if !ok {
				t.Errorf("application %s: no such released binary", c.BOMRef)
				continue
			}
			if len(c.Hashes) != 1 || c.Hashes[0].Alg != "SHA-256" || c.Hashes[0].Content != sha(bin) {
				t.Errorf("application %s: hashes %+v, want SHA-256 %s", c.BOMRef, c.Hashes, sha(bin))
			}
		case "library":
			if c.PURL != c.BOMRef || !strings.HasPrefix(c.PURL, "pkg:golang/") || !strings.HasSuffix(c.PURL, "@"+strings.ReplaceAll(c.Version, "+", "%2B")) {
				t.Errorf("library %s: purl %s, version %s", c.Name, c.PURL, c.Version)
			}
		default:
			t.Errorf("component %s of type %q", c.BOMRef, c.Type)
		}
	}
	for ref := range r.binaries {
		if !strings.HasPrefix(ref, "image/") && !slices.Contains(apps, ref) {
			t.Errorf("the released binary %s is not in the SBOM", ref)
		}
	}

	deps := map[string][]string{}
	for _, d := range doc.Dependencies {
		if _, ok := refs[d.Ref]; !ok {
			t.Errorf("dependencies: %s is no component", d.Ref)
		}
		for _, on := range d.DependsOn {
			if _, ok := refs[on]; !ok {
				t.Errorf("dependencies: %s depends on %s, which is no component", d.Ref, on)
			}
		}
		deps[d.Ref] = d.DependsOn
	}
	if got := slices.Sorted(slices.Values(deps[doc.Metadata.Component.BOMRef])); !slices.Equal(got, slices.Sorted(slices.Values(apps))) {
		t.Errorf("%s depends on %v, want the applications %v", doc.Metadata.Component.BOMRef, got, apps)
	}
	purl := func(module string) string {
		v := strings.TrimSpace(run(t, nil, "go", "list", "-m", "-f", "{{.Version}}", module))
		return "pkg:golang/" + module + "@" + v
	}
	std := "pkg:golang/stdlib@" + strings.TrimSpace(run(t, nil, "go", "env", "GOVERSION"))
	clientGo, controllerRuntime := purl("k8s.io/client-go"), purl("sigs.k8s.io/controller-runtime")
	for _, app := range apps {
		want := []string{std, clientGo}
		if strings.HasPrefix(app, "simplewebapp-operator_") {
			want = append(want, controllerRuntime)
		}
		for _, w := range want {
			if !slices.Contains(deps[app], w) {
				t.Errorf("%s does not depend on %s", app, w)
			}
		}
	}
	t.Logf("SBOM: %d components (%d applications), serial %s", len(doc.Components), len(apps), doc.SerialNumber)
}
