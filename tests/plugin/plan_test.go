package plugin

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the output")

// planApp creates a SimpleWebApp labelled plan-test=run with spec (YAML
// indented by two under spec:) and waits until the operator reports it
// Available: its status is then what runs. Other tests (and earlier runs of
// this one) leave theirs in the same API server; plan -A -l passes over them.
func planApp(t *testing.T, run, ns, name, spec string) {
	t.Helper()
	doc := fmt.Sprintf("apiVersion: example.com/v1\nkind: SimpleWebApp\nmetadata:\n  name: %s\n  namespace: %s\n  labels: {plan-test: %s}\nspec:\n  %s\n", name, ns, run, spec)
	f := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	deployed(t, f)
}

// planOutput is what `kubectl swa plan -o json` prints.
type planOutput struct {
	Moves []struct {
		From, To, Shape, Example, Diff, DiffError string
		Count                                     int
		Apps                                      []string
	}
	Stays      []string
	HeldByHalt []struct{ App, Running, Version, Halted, Reason string }
	Halts      struct {
		Read   bool
		Note   string
		Halted []struct{ Version, Content string }
	}
}

func planJSON(t *testing.T, stdin string, args ...string) (int, planOutput) {
	t.Helper()
	code, out, errOut := swaClusterStdin(t, stdin, append(args, "-o", "json")...)
	var p planOutput
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("plan -o json: exit %d, stderr %q, %v:\n%s", code, errOut, err, out)
	}
	return code, p
}

// plan over a live fleet: four SimpleWebApps follow channel stable in two
// namespaces (one with patches), one is pinned. A channels tree whose stable
// lists a newer version moves the four, in two groups by spec shape, with
// the diff of one example each (a golden file); the same tree without the
// new version moves nothing. A halted new version holds them, and
// resume-version lifts the halt.
func TestPlan(t *testing.T) {
	stable, next := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 4)
	nsA := testkit.Namespace(t, env.Client, testkit.NS{Prefix: "plan-a-", Keep: true})
	nsB := testkit.Namespace(t, env.Client, testkit.NS{Prefix: "plan-b-", Keep: true})
	opNS := testkit.Namespace(t, env.Client, testkit.NS{Prefix: "plan-op-", Keep: true})
	run, selector := nsA, "plan-test="+nsA
	planApp(t, run, nsA, "one", "channel: stable")
	planApp(t, run, nsA, "two", "replicas: 2\n  message: two") // replicas and message are no shape
	planApp(t, run, nsB, "three", "channel: stable")
	planApp(t, run, nsB, "patched", `channel: stable
  patches:
  - target: {kind: Deployment, name: web}
    patch: |
      spec:
        template:
          spec:
            containers:
            - name: web
              resources:
                limits: {memory: 128Mi}`)
	planApp(t, run, nsB, "pinned", "version: "+stable)

	newer := t.TempDir()
	testkit.CopyPackage(t, testkit.DirTree(newer), stable, next, testkit.MarkVersion(next))
	testkit.WriteChannel(t, testkit.DirTree(newer), "stable", stable, next)
	same := t.TempDir()
	testkit.WriteChannel(t, testkit.DirTree(same), "stable", stable)
	args := func(dir string, more ...string) []string {
		return append([]string{"plan", "--channels-dir", dir, "-A", "-l", selector, "--operator-namespace", opNS}, more...)
	}

	t.Run("nothing moves", func(t *testing.T) {
		code, out, errOut := swaCluster(t, args(same)...)
		if code != 0 || !strings.HasPrefix(out, "No SimpleWebApp would move.\n\n0 would move, 5 stay, 0 held by a halt,") || errOut != "" {
			t.Errorf("exit %d (want 0), stderr %q:\n%s", code, errOut, out)
		}
	})

	t.Run("golden", func(t *testing.T) {
		code, out, errOut := swaCluster(t, args(newer)...)
		if code != 1 || errOut != "" {
			t.Errorf("exit %d (want 1: some move), stderr %q", code, errOut)
		}
		// The generated namespaces' random suffixes, as a fixed string of
		// the same length: the table keeps its alignment.
		for _, ns := range []string{nsA, nsB, opNS} {
			out = strings.ReplaceAll(out, ns, ns[:len(ns)-5]+"xxxxx")
		}
		compareGolden(t, "plan.txt", out)

		code, p := planJSON(t, "", args(newer)...)
		type group struct{ from, to, shape, example string }
		var got []group
		for _, m := range p.Moves {
			got = append(got, group{m.From, m.To, m.Shape, m.Example})
			if !strings.Contains(m.Diff, "+++ "+next+"/ConfigMap/"+m.Example[:strings.Index(m.Example, "/")]+"/") {
				t.Errorf("group %s: the diff shows no ConfigMap of %s:\n%s", m.Example, next, m.Diff)
			}
		}
		want := []group{{stable, next, "", nsA + "/one"}, {stable, next, "patches", nsB + "/patched"}}
		if code != 1 || !slices.Equal(got, want) || len(p.Moves) != 2 || p.Moves[0].Count != 3 || p.Moves[1].Count != 1 ||
			!slices.Equal(p.Stays, []string{nsB + "/pinned"}) || !p.Halts.Read {
			t.Errorf("-o json: exit %d, groups %+v, stays %v, halts %+v; want groups %+v, 3 and 1, %s/pinned staying", code, got, p.Stays, p.Halts, want, nsB)
		}

		// Offline, from an export of the fleet: the same moves.
		code, offline := planJSON(t, exportFleet(t, nsA, nsB), "plan", "--channels-dir", newer, "-f", "-", "-l", selector)
		if code != 1 || offline.Halts.Read || len(offline.Moves) != len(p.Moves) {
			t.Fatalf("offline: exit %d, %d groups (want 1 and %d), halts %+v", code, len(offline.Moves), len(p.Moves), offline.Halts)
		}
		for i := range p.Moves {
			a, b := p.Moves[i], offline.Moves[i]
			if a.From != b.From || a.To != b.To || a.Shape != b.Shape || !slices.Equal(a.Apps, b.Apps) || a.Diff != b.Diff {
				t.Errorf("offline group %d differs: %+v\nlive: %+v", i, b, a)
			}
		}
	})

	t.Run("halted", func(t *testing.T) {
		// The new version as the reconciler resolves it, halted: the key is
		// its content's.
		app := &webappv1.SimpleWebApp{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: nsA, Name: "one"}, app); err != nil {
			t.Fatal(err)
		}
		rel, err := render.Channels{FS: channels.FS, Dir: os.DirFS(newer)}.ResolveApp(t.Context(), app)
		if err != nil || rel.Version != next {
			t.Fatalf("resolved %s (%v), want %s", rel.Version, err, next)
		}
		key, err := fleet.KeyOf(rel)
		if err != nil {
			t.Fatal(err)
		}
		before := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
		failed := []fleet.Failure{{App: nsA + "/one", RolledBackAt: before}, {App: nsB + "/three", RolledBackAt: before}}
		st := &fleet.State{Key: key, StartedAt: before, Waves: [][]string{{nsA + "/one", nsB + "/three"}, {}}, WaveStartedAt: before,
			CountSince: before, Failures: failed, Tried: 2,
			Halted: &fleet.Halt{At: before, Reason: "2 of 2 upgrades to it failed, in 2 namespaces"}}
		cm, err := st.ConfigMap(opNS)
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}

		code, out, errOut := swaCluster(t, args(newer)...)
		t.Logf("kubectl swa plan (%s halted), exit %d:\n%s%s", next, code, errOut, out)
		for _, want := range []string{
			"No SimpleWebApp would move.\n\n0 would move, 1 stay, 4 held by a halt,",
			fmt.Sprintf("HELD %s/one: stays at %s; version %s (content %s) is halted for the fleet: 2 of 2 upgrades", nsA, stable, next, key.Hash),
			fmt.Sprintf("HELD %s/patched: stays at %s;", nsB, stable),
			fmt.Sprintf("HALTED %s (content %s) since %s: 2 of 2", next, key.Hash, before.UTC().Format(time.RFC3339)),
		} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("exit %d (want 0: nothing moves); output lacks %q", code, want)
			}
		}

		code, out, errOut = swaCluster(t, "resume-version", next, "--operator-namespace", opNS)
		if want := fmt.Sprintf("resumed %s (content %s), halted since %s: 2 of 2", next, key.Hash, before.UTC().Format(time.RFC3339)); code != 0 || !strings.HasPrefix(out, want) {
			t.Errorf("resume-version: exit %d, stderr %q, stdout %q; want 0 and %q", code, errOut, out, want)
		}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Fatal(err)
		}
		got, err := fleet.FromConfigMap(cm)
		if err != nil {
			t.Fatal(err)
		}
		if got.Halted != nil || !got.CountSince.After(before.Time) || got.Failures != nil || got.Tried != 0 || !slices.Equal(got.Waves[0], st.Waves[0]) {
			t.Errorf("after resume: halted %v, countSince %s (was %s), failures %v, tried %d, waves %v; want no halt, later countSince, no failures, the same waves",
				got.Halted, got.CountSince, before, got.Failures, got.Tried, got.Waves)
		}
		if code, _ := planJSON(t, "", args(newer)...); code != 1 {
			t.Errorf("plan after the resume: exit %d, want 1 (they move again)", code)
		}

		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{next}, fmt.Sprintf("error: version %s is not halted (content %s); no version is halted\n", next, key.Hash)},
			{[]string{"9.9.9"}, fmt.Sprintf("error: version 9.9.9 has no roll-out state in namespace %s; no version is halted\n", opNS)},
		} {
			code, out, errOut := swaCluster(t, append([]string{"resume-version", "--operator-namespace", opNS}, c.args...)...)
			if code != 1 || out != "" || errOut != c.want {
				t.Errorf("resume-version %v: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.args, code, out, errOut, c.want)
			}
		}

		// Halted again, then resumed by its content only.
		if err := env.Client.Delete(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		if cm, err = st.ConfigMap(opNS); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		code, _, errOut = swaCluster(t, "resume-version", next, "--content", "000000000000", "--operator-namespace", opNS)
		wantErr := fmt.Sprintf("error: version %s (content 000000000000) has no roll-out state in namespace %s; halted: %s (content %s)\n", next, opNS, next, key.Hash)
		if code != 1 || errOut != wantErr {
			t.Errorf("another content: exit %d, stderr %q; want 1 and %q", code, errOut, wantErr)
		}
		if code, out, errOut := swaCluster(t, "resume-version", next, "--content", key.Hash, "--operator-namespace", opNS); code != 0 || !strings.HasPrefix(out, "resumed "+next) {
			t.Errorf("--content %s: exit %d, stdout %q, stderr %q; want 0", key.Hash, code, out, errOut)
		}
	})

	t.Run("states forbidden", func(t *testing.T) {
		// A user who may list SimpleWebApps and nothing else.
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "plan-test-reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{webappv1.GroupVersion.Group}, Resources: []string{"simplewebapps"}, Verbs: []string{"list"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "plan-test-reader"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "planner"}}}
		for _, o := range []client.Object{role, binding} {
			if err := env.Client.Create(t.Context(), o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
		}
		// RBAC takes effect when the API server's informer has the binding.
		var code int
		var out, errOut string
		testkit.WaitFor(t, timeout, "planner may list SimpleWebApps", func(context.Context) (bool, string) {
			code, out, errOut = swaCluster(t, args(newer, "--as", "planner")...)
			return code == 1, errOut
		})
		if !strings.Contains(errOut, "warning: you may not list the roll-out states (ConfigMaps) in namespace "+opNS+": planning without the versions the operator halted") ||
			!strings.Contains(out, "\nHalted versions: not read: forbidden.\n") {
			t.Errorf("exit %d, stderr %q:\n%s", code, errOut, out)
		}
		code, _, errOut = swaCluster(t, "resume-version", next, "--operator-namespace", opNS, "--as", "planner")
		if code != 2 || !strings.Contains(errOut, `User "planner" cannot list resource "configmaps"`) {
			t.Errorf("resume-version as planner: exit %d, stderr %q; want 2 and the 403", code, errOut)
		}
	})
}

// Usage errors of plan and resume-version exit 2 with what is wrong
// (their help: TestHelpAndUsageErrors).
func TestPlanUsage(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteChannel(t, testkit.DirTree(dir), "stable", testkit.ChannelVersion(t, "stable"))
	candidate := filepath.Join(t.TempDir(), "candidate.yaml")
	if err := os.WriteFile(candidate, []byte(testkit.ChannelYAML("99.0.0")), 0o644); err != nil {
		t.Fatal(err)
	}
	fleetFile := writeCR(t, "default", "web", "channel: stable")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plan"}, "[channels-dir channel-file] is required"},
		{[]string{"plan", "--channels-dir", dir, "--channel-file", candidate}, "[channel-file channels-dir] were all set"},
		{[]string{"plan", "--channels-dir", dir, "--channel", "rapid"}, "--channel names the channel of --channel-file"},
		{[]string{"plan", "--channel-file", candidate}, `"candidate.yaml" is no channel name`},
		{[]string{"plan", "--channel-file", candidate, "--channel", "rapid"}, `channel "rapid" lists version 99.0.0, which has no package`},
		{[]string{"plan", "--channels-dir", filepath.Join(dir, "nope")}, "is no directory"},
		{[]string{"plan", "--channels-dir", dir, "-A", "-f", fleetFile}, "-A lists the SimpleWebApps of the cluster: not with -f or -k"},
		{[]string{"plan", "--channels-dir", dir, "-o", "wide"}, `output format "wide"`},
		{[]string{"plan", "--channels-dir", dir, "extra"}, `unknown command "extra" for "kubectl swa plan"`},
		{[]string{"resume-version"}, "accepts 1 arg(s), received 0"},
	} {
		code, out, errOut := swa(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	// A valid file under a valid name, offline: a SimpleWebApp that runs
	// the version the file lists stays.
	running := filepath.Join(t.TempDir(), "running.yaml")
	doc := "apiVersion: example.com/v1\nkind: SimpleWebApp\nmetadata: {name: web, namespace: default}\nspec: {channel: stable}\n" +
		"status: {version: " + testkit.ChannelVersion(t, "stable") + "}\n"
	if err := os.WriteFile(running, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := swa(t, "plan", "--channel-file", filepath.Join(dir, "stable"), "-f", running)
	if code != 0 || !strings.HasPrefix(out, "No SimpleWebApp would move.\n") {
		t.Errorf("--channel-file: exit %d, stderr %q:\n%s", code, errOut, out)
	}
}

// exportFleet is `kubectl get swa -o yaml` of the SimpleWebApps of
// namespaces: a List, status included.
func exportFleet(t *testing.T, namespaces ...string) string {
	t.Helper()
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, ns := range namespaces {
		var apps webappv1.SimpleWebAppList
		if err := env.Client.List(t.Context(), &apps, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range apps.Items {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&apps.Items[i])
			if err != nil {
				t.Fatal(err)
			}
			u := unstructured.Unstructured{Object: m}
			u.SetGroupVersionKind(webappv1.GroupVersion.WithKind("SimpleWebApp"))
			list.Items = append(list.Items, u)
		}
	}
	b, err := yaml.Marshal(list.UnstructuredContent())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compareGolden compares got with testdata/name, or rewrites it with
// -update.
func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with go test ./tests/plugin -run %s -update)", err, t.Name())
	}
	if string(want) != got {
		d, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(string(want)), B: difflib.SplitLines(got),
			FromFile: path, ToFile: "output", Context: 3})
		t.Errorf("the output differs from %s (rewrite it with -update after a deliberate change):\n%s", path, d)
	}
}
