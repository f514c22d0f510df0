package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"example.com/simplewebapp-operator/internal/testkit"
)

const golden = "../golden/testdata"

// `kubectl swa render` prints exactly the golden files (which tests/golden
// checks against render.Render) for every case and every version.
func TestRenderEqualsGolden(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join(golden, "cases", "*.yaml"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	n := 0
	for _, version := range testkit.Versions(t) {
		for _, c := range cases {
			want, err := os.ReadFile(filepath.Join(golden, version, filepath.Base(c)))
			if err != nil {
				t.Fatal(err)
			}
			code, out, errOut := swa(t, "render", "-f", c, "-n", "demo", "--version", version)
			if code != 0 || out != string(want) {
				t.Errorf("render -f %s --version %s: exit %d, stderr %q; stdout equals the golden file: %v", c, version, code, errOut, out == string(want))
			}
			n++
		}
	}
	// --channel renders the channel's newest version, as the operator does.
	for _, ch := range testkit.ChannelNames(t) {
		c := filepath.Join(golden, "cases", "my-webapp.yaml")
		want, err := os.ReadFile(filepath.Join(golden, testkit.ChannelVersion(t, ch), "my-webapp.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut := swa(t, "render", "-f", c, "-n", "demo", "--channel", ch)
		if code != 0 || out != string(want) {
			t.Errorf("render --channel %s: exit %d, stderr %q; equals the golden file of %s: %v", ch, code, errOut, testkit.ChannelVersion(t, ch), out == string(want))
		}
	}
	t.Logf("%d golden files reproduced byte for byte", n)
}

// A patch the package does not allow is refused offline with the reason the
// reconciler would report, and nothing is printed on stdout.
func TestRenderRefusesWhatTheOperatorRefuses(t *testing.T) {
	for reason, spec := range refusals {
		f := writeCR(t, "default", "refused", spec)
		code, out, errOut := swa(t, "render", "-f", f)
		if code <= 1 || out != "" || !strings.Contains(errOut, "refused: "+reason+": ") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit > 1 and the refusal", reason, code, out, errOut)
		}
	}
}

// refusals are specs the operator refuses, by reason.
var refusals = map[string]string{
	// hostNetwork is outside the package's patch policy.
	"PatchNotAllowed": `replicas: 1
  patches:
  - target: {kind: Deployment, name: web}
    patch: |
      spec:
        template:
          spec:
            hostNetwork: true`,
	"VersionNotFound": `version: 99.0.0`,
	"ChannelNotFound": `channel: nosuchchannel`,
}

// writeCR writes a SimpleWebApp with the given spec (YAML indented by two
// under spec:) and returns the file's path.
func writeCR(t *testing.T, ns, name, spec string) string {
	t.Helper()
	doc := "apiVersion: example.com/v1\nkind: SimpleWebApp\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\nspec:\n  " + spec + "\n"
	f := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}
