package plugin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Input goes through kubectl's resource builder: -f repeated, directories
// (-R for subdirectories), stdin, kustomize directories (-k), Lists as
// `kubectl get -o yaml` prints them, and streams where other kinds are
// passed over with a note. render -o name lists the Deployment of each
// SimpleWebApp read.
func TestInput(t *testing.T) {
	dir, kdir := t.TempDir(), t.TempDir()
	doc := func(name string) string {
		return "apiVersion: example.com/v1\nkind: SimpleWebApp\nmetadata:\n  name: " + name + "\nspec:\n  replicas: 1\n"
	}
	write := func(rel, content string) string {
		p := filepath.Join(dir, rel)
		if k, ok := strings.CutPrefix(rel, "k/"); ok {
			p = filepath.Join(kdir, k) // not under dir: kubectl -R reads no kustomization.yaml
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := write("a.yaml", doc("a")), write("b.yaml", doc("b"))
	write("sub/c.yaml", doc("c"))
	write("k/app.yaml", doc("k"))
	write("k/kustomization.yaml", "namePrefix: pre-\nresources:\n- app.yaml\n")
	list := "apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n- " +
		strings.ReplaceAll(doc("l1"), "\n", "\n  ") + "\n- " + strings.ReplaceAll(doc("l2"), "\n", "\n  ")
	mixed := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n---\n# a comment only\n---\n" + doc("m") +
		"---\napiVersion: widgets.example.org/v1\nkind: Widget\nmetadata:\n  name: w\n"

	for _, c := range []struct {
		name  string
		stdin string
		args  []string
		want  []string // SimpleWebApps rendered
		notes []string // on stderr
	}{
		{name: "-f twice", args: []string{"-f", a, "-f", b}, want: []string{"a", "b"}},
		{name: "-f a,b", args: []string{"-f", a + "," + b}, want: []string{"a", "b"}},
		{name: "-f dir", args: []string{"-f", dir}, want: []string{"a", "b"}},
		{name: "-f dir -R", args: []string{"-f", dir, "-R"}, want: []string{"a", "b", "c"}},
		{name: "-k", args: []string{"-k", kdir}, want: []string{"pre-k"}},
		{name: "List on stdin", stdin: list, args: []string{"-f", "-"}, want: []string{"l1", "l2"}},
		{name: "stdin and a file", stdin: doc("s"), args: []string{"-f", a, "-f", "-"}, want: []string{"a", "s"}},
		{name: "mixed stream", stdin: mixed, args: []string{"-f", "-"}, want: []string{"m"}, notes: []string{
			`note: passing over v1 ConfigMap "settings" from STDIN: not a SimpleWebApp`,
			`note: passing over widgets.example.org/v1 Widget "w" from STDIN: not a SimpleWebApp`,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := swaStdin(t, c.stdin, append([]string{"render", "-o", "name", "-n", "demo"}, c.args...)...)
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if name, ok := strings.CutPrefix(line, "deployment.apps/"); ok {
					got = append(got, strings.TrimSuffix(name, "-web"))
				}
			}
			if code != 0 || !slices.Equal(got, c.want) {
				t.Errorf("exit %d, stderr %q; rendered %v, want %v", code, errOut, got, c.want)
			}
			for _, n := range c.notes {
				if !strings.Contains(errOut, n) {
					t.Errorf("stderr lacks %q:\n%s", n, errOut)
				}
			}
		})
	}

	for _, c := range []struct {
		name, stdin, want string
		args              []string
	}{
		{name: "no input", want: "no SimpleWebApp given"},
		{name: "no SimpleWebApp", stdin: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n", args: []string{"-f", "-"}, want: "the input holds no SimpleWebApp"},
		{name: "missing file", args: []string{"-f", filepath.Join(dir, "nope.yaml")}, want: "does not exist"},
		{name: "-f and -k", args: []string{"-f", a, "-k", kdir}, want: "only one of -f or -k"},
		{name: "stdin twice", args: []string{"-f", "-", "-f", "-"}, want: "standard input cannot be used for multiple arguments"},
		{name: "-n against the file", args: []string{"-f", writeCR(t, "other", "x", "replicas: 1")}, want: "You must pass '--namespace=other'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := swaStdin(t, c.stdin, append([]string{"render", "-n", "demo"}, c.args...)...)
			if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, c.want)
			}
		})
	}
}
