package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func readChartFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", chartDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSetImage: the chart's default image becomes the release image, only
// image.repository and image.tag change, and a tag equal to the version
// stays empty (the chart's appVersion).
func TestSetImage(t *testing.T) {
	values := readChartFile(t, "values.yaml")
	var before map[string]any
	if err := yaml.Unmarshal(values, &before); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, tag, wantTag string }{
		{"registry.example:5000/team/simplewebapp-operator", "1.2.3", ""},
		{"docker.io/library/simplewebapp-operator", "1.2.3-hotfix", "1.2.3-hotfix"},
	} {
		out, err := setImage(values, tc.name, tc.tag, "1.2.3")
		if err != nil {
			t.Fatal(err)
		}
		var after map[string]any
		if err := yaml.Unmarshal(out, &after); err != nil {
			t.Fatal(err)
		}
		img := after["image"].(map[string]any)
		if img["repository"] != tc.name || img["tag"] != tc.wantTag {
			t.Errorf("image %v, want repository %s tag %q", img, tc.name, tc.wantTag)
		}
		// Everything else as before, comments included.
		img["repository"], img["tag"] = before["image"].(map[string]any)["repository"], ""
		if b1, b2 := mustJSON(t, before), mustJSON(t, after); b1 != b2 {
			t.Errorf("setImage changed more than the image:\n%s\n%s", b1, b2)
		}
		if n := len(strings.Split(string(out), "\n")); n != len(strings.Split(string(values), "\n")) {
			t.Errorf("%d lines, values.yaml has %d", n, len(strings.Split(string(values), "\n")))
		}
	}
	if _, err := setImage([]byte("replicas: 2\n"), "x", "1", "1"); err == nil {
		t.Error("setImage without an image: block succeeded")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSetChartVersion(t *testing.T) {
	chart := readChartFile(t, "Chart.yaml")
	out, err := setChartVersion(chart, "4.5.6-rc.1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "\nversion: \"4.5.6-rc.1\"\n") || !strings.Contains(string(out), "\nappVersion: \"4.5.6-rc.1\"\n") {
		t.Errorf("Chart.yaml:\n%s", out)
	}
	if strings.Count(string(out), "\n") != strings.Count(string(chart), "\n") {
		t.Error("setChartVersion changed the number of lines")
	}
	if _, err := setChartVersion([]byte("name: x\nversion: 1\nversion: 2\nappVersion: 1\n"), "1.0.0"); err == nil {
		t.Error("two version: lines accepted")
	}
}

// TestChartFiles: .helmignore's globs leave files out by base name, and
// unsupported patterns are refused instead of being read differently from
// helm.
func TestChartFiles(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		".helmignore":           "# editor files\n*.swp\nscratch/\n",
		"Chart.yaml":            "name: c\n",
		"values.yaml":           "a: 1\n",
		"values.yaml.swp":       "x",
		"templates/a.yaml":      "a",
		"templates/.hidden":     "x",
		"templates/b.yaml.swp":  "x",
		"scratch/notes.txt":     "x",
		"files/scratch":         "a file named like the ignored directory",
		"crds/x.yaml":           "x",
		"templates/tests/t.yml": "t",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := chartFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.name)
	}
	slices.Sort(names)
	want := []string{".helmignore", "Chart.yaml", "crds/x.yaml", "files/scratch", "templates/a.yaml", "templates/tests/t.yml", "values.yaml"}
	if !slices.Equal(names, want) {
		t.Errorf("chart files %q, want %q", names, want)
	}
	for _, bad := range []string{"!keep.txt", "templates/*.bak", "**/x"} {
		if err := os.WriteFile(filepath.Join(dir, ".helmignore"), []byte(bad+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := chartFiles(dir); err == nil {
			t.Errorf(".helmignore %q accepted", bad)
		}
	}
}

func TestReleaseImage(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "docker.io/library/simplewebapp-operator:1.0.0",
		"r.example:5000/team/op":   "r.example:5000/team/op:1.0.0",
		"r.example:5000/team/op:2": "r.example:5000/team/op:2",
	} {
		if got, err := releaseImage(in, "1.0.0"); err != nil || got != want {
			t.Errorf("releaseImage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := releaseImage("r.example/op@sha256:"+strings.Repeat("0", 64), "1.0.0"); err == nil {
		t.Error("an image with a digest accepted")
	}
}

func TestPURL(t *testing.T) {
	for _, tc := range []struct{ path, version, want string }{
		{"k8s.io/client-go", "v0.37.2", "pkg:golang/k8s.io/client-go@v0.37.2"},
		{"github.com/BurntSushi/toml", "v1.0.0+incompatible", "pkg:golang/github.com/BurntSushi/toml@v1.0.0%2Bincompatible"},
	} {
		if got := goModule(tc.path, tc.version).PURL; got != tc.want {
			t.Errorf("purl of %s@%s: %s, want %s", tc.path, tc.version, got, tc.want)
		}
	}
}

func TestContentUUID(t *testing.T) {
	a, b := contentUUID([]byte("a")), contentUUID([]byte("b"))
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(a) {
		t.Errorf("%s is not a version 5 UUID", a)
	}
	if a == b || a != contentUUID([]byte("a")) {
		t.Errorf("contentUUID: a %s (again %s), b %s", a, contentUUID([]byte("a")), b)
	}
}

// TestSBOMSerial: the SBOM's serial number is a function of its content:
// the same for the same binaries and version, another for another version.
// The test binary stands in for every released binary (it has Go build
// information too).
func TestSBOMSerial(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{work: t.TempDir(), epoch: time.Unix(1700000000, 0).UTC()}
	for _, p := range pluginPlatforms {
		for _, name := range []string{operatorBin, pluginBin} {
			if err := os.MkdirAll(r.binDir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(r.binDir(p), p.exe(name)), bin, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	sbom := func(version string) (doc bom) {
		t.Helper()
		r.version, r.stage = version, t.TempDir()
		if err := r.sbom(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(r.stage, sbomFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	a, again, b := sbom("1.0.0"), sbom("1.0.0"), sbom("1.0.1")
	if a.SerialNumber != again.SerialNumber || a.SerialNumber == b.SerialNumber {
		t.Errorf("serial numbers: 1.0.0 %s, again %s, 1.0.1 %s", a.SerialNumber, again.SerialNumber, b.SerialNumber)
	}
	if a.Metadata.Timestamp != "2023-11-14T22:13:20Z" {
		t.Errorf("timestamp %s, want the release's time", a.Metadata.Timestamp)
	}
	if n := len(a.Components); n < len(pluginPlatforms)+len(imageArches)+1 {
		t.Errorf("%d components", n)
	}
}
