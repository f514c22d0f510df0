package plugin

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

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
// under spec:) and returns the file's path. ns "" names no namespace.
func writeCR(t *testing.T, ns, name, spec string) string {
	t.Helper()
	meta := "  name: " + name + "\n"
	if ns != "" {
		meta += "  namespace: " + ns + "\n"
	}
	doc := "apiVersion: example.com/v1\nkind: SimpleWebApp\nmetadata:\n" + meta + "spec:\n  " + spec + "\n"
	f := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// Offline, render refuses what the API server refuses, with the CRD's own
// messages and field paths: the apiextensions validation code runs on the
// embedded CRD. The same SimpleWebApp is sent to the test's API server (a
// dry-run create): render's error must be the API server's.
func TestRenderValidatesWithTheCRD(t *testing.T) {
	for name, spec := range map[string]string{
		"maximum":    "replicas: 500",
		"cel":        `message: "   "`,
		"both":       "replicas: 500\n  message: \"\"",
		"cel nested": "autoscaling: {minReplicas: 5, maxReplicas: 2}",
		// The rule on autoscaling reads minReplicas, which only the
		// CRD's default sets here.
		"cel defaulted": "autoscaling: {maxReplicas: 1}\n  upgradeTimeout: 1s",
	} {
		t.Run(name, func(t *testing.T) {
			f := writeCR(t, "default", "invalid", spec)
			code, out, errOut := swa(t, "render", "-f", f)
			if code != 2 || out != "" || !strings.Contains(errOut, `SimpleWebApp.example.com "invalid" is invalid: `) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and the API server's refusal", code, out, errOut)
			}
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
				t.Fatal(err)
			}
			err = env.Client.Create(t.Context(), obj, client.DryRunAll)
			var status apierrors.APIStatus
			if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
				t.Fatalf("the API server accepts it (%v): the case tests nothing", err)
			}
			// The schema's errors come in no fixed order: the same causes,
			// and nothing else (the same length).
			want := "error: " + err.Error() + "\n"
			for _, c := range status.Status().Details.Causes {
				if cause := c.Field + ": " + c.Message; !strings.Contains(errOut, cause) {
					t.Errorf("render's error lacks the API server's %q", cause)
				}
			}
			if len(errOut) != len(want) {
				t.Errorf("render's error differs from the API server's:\n%s%s", errOut, want)
			}
		})
	}
	// Unknown fields are refused, as by kubectl's strict field validation.
	code, _, errOut := swa(t, "render", "-f", writeCR(t, "default", "typo", "replica: 2"))
	if code != 2 || !strings.Contains(errOut, `unknown field "spec.replica"`) {
		t.Errorf("spec.replica: exit %d, stderr %q; want exit 2 and the unknown field", code, errOut)
	}
}

// -o prints the render through kubectl's printers: one List for json and
// yaml (both parse, with the golden file's objects), a line per object for
// name.
func TestRenderOutput(t *testing.T) {
	c := filepath.Join(golden, "cases", "my-webapp.yaml")
	version := testkit.Versions(t)[0]
	raw, err := os.ReadFile(filepath.Join(golden, version, "my-webapp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string // kind/name of the golden file's objects
	for _, doc := range strings.Split(string(raw), "\n---") {
		var o unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(strings.TrimPrefix(doc, "---"), " # fields applied by") || o.GetKind() == "" {
			continue
		}
		want = append(want, o.GetKind()+"/"+o.GetName())
	}
	for _, format := range []string{"json", "yaml"} {
		code, out, errOut := swa(t, "render", "-f", c, "-n", "demo", "--version", version, "-o", format)
		var list unstructured.UnstructuredList
		var obj map[string]any
		var perr error
		if format == "json" {
			perr = json.Unmarshal([]byte(out), &obj)
		} else {
			perr = yaml.Unmarshal([]byte(out), &obj)
		}
		if code != 0 || perr != nil {
			t.Fatalf("-o %s: exit %d, stderr %q, parse: %v\n%s", format, code, errOut, perr, out)
		}
		list.SetUnstructuredContent(obj)
		var got []string
		for _, it := range list.Items {
			got = append(got, it.GetKind()+"/"+it.GetName())
		}
		if list.GetKind() != "List" || !slices.Equal(got, want) {
			t.Errorf("-o %s: a %s of %v; want a List of %v", format, list.GetKind(), got, want)
		}
	}
	code, out, _ := swa(t, "render", "-f", c, "-n", "demo", "--version", version, "-o", "name")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != len(want) || !slices.Contains(lines, "deployment.apps/my-webapp-web") {
		t.Errorf("-o name: exit %d:\n%s\nwant %d lines with deployment.apps/my-webapp-web", code, out, len(want))
	}
	if code, _, errOut := swa(t, "render", "-f", c, "-o", "table"); code == 0 || !strings.Contains(errOut, "table") {
		t.Errorf("-o table: exit %d, stderr %q; want an error", code, errOut)
	}
}
