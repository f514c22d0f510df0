package plugin

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

const timeout = 30 * time.Second

// deployed creates the SimpleWebApp of file, plays the Deployment
// controller, and waits until the operator reports it Available: the
// cluster then holds exactly what the operator writes.
func deployed(t *testing.T, file string) *webappv1.SimpleWebApp {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	app := &webappv1.SimpleWebApp{}
	if err := yaml.UnmarshalStrict(raw, app); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(t.Context(), app); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, timeout, "Deployment of "+app.Name, func(ctx context.Context) (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: app.Name + "-web"}, &appsv1.Deployment{})
		return err == nil, fmt.Sprint(err)
	})
	if err := env.MarkRolledOut(t.Context(), app.Namespace, app.Name+"-web"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, timeout, app.Name+" Available", func(ctx context.Context) (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(app.Status.Conditions, webappv1.ConditionReady)
		return c != nil && c.Reason == webappv1.ReasonAvailable && c.ObservedGeneration == app.Generation, fmt.Sprintf("%+v", app.Status.Conditions)
	})
	return app
}

// resourceVersions of the SimpleWebApp and every object it owns.
func resourceVersions(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	lists := []client.ObjectList{&webappv1.SimpleWebAppList{}, &appsv1.DeploymentList{}, &corev1.ConfigMapList{}, &corev1.ServiceList{}}
	for _, l := range lists {
		if err := env.Client.List(t.Context(), l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(l)
		for _, it := range items {
			o := it.(client.Object)
			out[fmt.Sprintf("%T/%s", o, o.GetName())] = o.GetResourceVersion()
		}
	}
	return out
}

// diff against the cluster: no change is exit 0 with no output; a replicas
// change, a message change and a channel move are unified diffs with exit 1;
// a refusal is exit 2 with the reconciler's reason. Nothing is written.
func TestDiff(t *testing.T) {
	ns := testkit.Namespace(t, env.Client, testkit.NS{Prefix: "plugin-", Keep: true})
	base := "replicas: 2\n  message: hello\n  channel: stable"
	deployed(t, writeCR(t, ns, "web", base))
	before := resourceVersions(t, ns)

	t.Run("no change", func(t *testing.T) {
		code, out, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "web", base))
		if code != 0 || out != "" {
			t.Errorf("exit %d, stdout:\n%s\nstderr: %s\nwant exit 0 and no diff", code, out, errOut)
		}
	})

	t.Run("replicas", func(t *testing.T) {
		code, out, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "web", "replicas: 3\n  message: hello\n  channel: stable"))
		t.Logf("kubectl swa diff (replicas 2 -> 3), exit %d:\n%s%s", code, errOut, out)
		if code != 1 {
			t.Errorf("exit %d, want 1 (changes)", code)
		}
		for _, want := range []string{
			"--- live/Deployment/" + ns + "/web-web\n+++ dry-run/Deployment/" + ns + "/web-web\n",
			"\n-  replicas: 2\n+  replicas: 3\n",
			"--- live/SimpleWebApp/" + ns + "/web\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("diff lacks %q", want)
			}
		}
		if strings.Contains(out, "ConfigMap") || strings.Contains(out, "/Service/") {
			t.Errorf("a replicas change shows other objects:\n%s", out)
		}
	})

	t.Run("message", func(t *testing.T) {
		code, out, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "web", "replicas: 2\n  message: hello, world\n  channel: stable"))
		t.Logf("kubectl swa diff (message), exit %d:\n%s%s", code, errOut, out)
		// A new content ConfigMap (its name hashes the message), the
		// Deployment mounting it, the old one pruned after the roll-out.
		if code != 1 || !strings.Contains(out, "+  message: hello, world\n") ||
			!regexp.MustCompile(`\+\+\+ dry-run/ConfigMap/\S+/web-web-content-\S+ \(pruned once the new objects are rolled out\)`).MatchString(out) ||
			!strings.Contains(out, "+++ dry-run/Deployment/") {
			t.Errorf("exit %d; want 1 and the new ConfigMap, the Deployment and the old ConfigMap pruned", code)
		}
	})

	t.Run("channel move", func(t *testing.T) {
		from, to := testkit.ChannelVersion(t, "stable"), testkit.ChannelVersion(t, "rapid")
		code, out, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "web", "replicas: 2\n  message: hello\n  channel: rapid"))
		t.Logf("kubectl swa diff (channel stable -> rapid), exit %d:\n%s%s", code, errOut, out)
		if !strings.Contains(errOut, fmt.Sprintf("version %s (newest in channel \"rapid\")", to)) {
			t.Errorf("stderr does not name version %s of rapid: %s", to, errOut)
		}
		if from != to && (code != 1 || !strings.Contains(out, "+++ dry-run/Deployment/")) {
			t.Errorf("%s -> %s: exit %d, want 1 and a Deployment diff", from, to, code)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for reason, spec := range refusals {
			code, out, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "web", spec))
			if code <= 1 || !strings.Contains(errOut, "refused: "+reason+": ") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit > 1 and the refusal", reason, code, out, errOut)
			}
			if reason == "PatchNotAllowed" {
				t.Logf("kubectl swa diff (hostNetwork patch), exit %d:\n%s", code, errOut)
			}
		}
	})

	t.Run("new SimpleWebApp", func(t *testing.T) {
		code, out, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "fresh", "replicas: 1"))
		for _, want := range []string{
			"+++ dry-run/SimpleWebApp/" + ns + "/fresh (created)\n",
			"+++ dry-run/Deployment/" + ns + "/fresh-web (created)\n",
			"+++ dry-run/Service/" + ns + "/fresh-web (created)\n",
		} {
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("exit %d (want 1), stderr %q; output lacks %q", code, errOut, want)
			}
		}
	})

	t.Run("kubectl get -o yaml", func(t *testing.T) {
		// What kubectl prints: a List with the fields the server sets
		// (resourceVersion, managedFields, status). The cluster diffed
		// with itself shows nothing.
		kubectl := operatortest.Kubectl{Bin: kubectlBin(t), CacheDir: t.TempDir(), AdminKubeconfig: env.Kubeconfig}
		list, err := kubectl.Admin("get", "swa", "-n", ns, "-o", "yaml", "--show-managed-fields")
		if err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"kind: List", "resourceVersion:", "managedFields:", "status:"} {
			if !strings.Contains(list, field) {
				t.Fatalf("kubectl get -o yaml has no %q; the test needs it:\n%s", field, list)
			}
		}
		code, out, errOut := swaClusterStdin(t, list, "diff", "-f", "-")
		if code != 0 || out != "" {
			t.Errorf("exit %d, stdout %q, stderr %q; want exit 0 and no diff", code, out, errOut)
		}
		// The same List with a replicas change and a copy under a new
		// name, resourceVersion and uid included: an update and a create.
		u := &unstructured.UnstructuredList{}
		if err := yaml.Unmarshal([]byte(list), &u.Object); err != nil {
			t.Fatal(err)
		}
		items, _, _ := unstructured.NestedSlice(u.Object, "items")
		if len(items) != 1 {
			t.Fatalf("%d SimpleWebApps in %s, want 1", len(items), ns)
		}
		changed := runtime.DeepCopyJSONValue(items[0]).(map[string]any)
		_ = unstructured.SetNestedField(changed, int64(3), "spec", "replicas")
		copied := runtime.DeepCopyJSONValue(items[0]).(map[string]any)
		_ = unstructured.SetNestedField(copied, "copy", "metadata", "name")
		_ = unstructured.SetNestedSlice(u.Object, []any{changed, copied}, "items")
		edited, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut = swaClusterStdin(t, string(edited), "diff", "-f", "-")
		for _, want := range []string{"\n-  replicas: 2\n+  replicas: 3\n", "+++ dry-run/SimpleWebApp/" + ns + "/copy (created)\n", "+++ dry-run/Deployment/" + ns + "/copy-web (created)\n"} {
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("exit %d (want 1), stderr %q; output lacks %q", code, errOut, want)
			}
		}
	})

	t.Run("KUBECTL_EXTERNAL_DIFF", func(t *testing.T) {
		// The program is this test binary (TestMain: fakeDiff). As kubectl
		// diff does, the words after the program's are passed after the
		// two directories when they are plain flags.
		record := filepath.Join(t.TempDir(), "record.json")
		t.Setenv("KUBECTL_EXTERNAL_DIFF", os.Args[0]+" -N --color=never $(rm;-rf)")
		t.Setenv(fakeDiffEnv, record)
		code, out, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "web", "replicas: 3\n  message: hello\n  channel: stable"))
		if code != 1 || !strings.Contains(out, "fake diff: 2 directories") {
			t.Fatalf("exit %d (want the program's 1), stdout %q, stderr %q", code, out, errOut)
		}
		r := readFakeDiff(t, record)
		if !strings.HasPrefix(filepath.Base(r.Args[0]), "LIVE-") || !strings.HasPrefix(filepath.Base(r.Args[1]), "MERGED-") ||
			!slices.Equal(r.Args[2:], []string{"-N", "--color=never"}) {
			t.Errorf("arguments %q; want the LIVE- and MERGED- directories, -N, --color=never", r.Args)
		}
		deploy := "apps.v1.Deployment." + ns + ".web-web"
		if !strings.Contains(r.Live[deploy], "\n  replicas: 2\n") || !strings.Contains(r.Merged[deploy], "\n  replicas: 3\n") {
			t.Errorf("%s: live\n%s\nmerged\n%s\nwant replicas 2 and 3", deploy, r.Live[deploy], r.Merged[deploy])
		}
		if swaFile := "example.com.v1.SimpleWebApp." + ns + ".web"; r.Live[swaFile] == "" || r.Merged[swaFile] == "" {
			t.Errorf("no %s in both directories: %v %v", swaFile, slices.Collect(maps.Keys(r.Live)), slices.Collect(maps.Keys(r.Merged)))
		}
		for _, dir := range r.Args[:2] {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s is left behind (%v)", dir, err)
			}
		}
		// The program's exit status is diff's, also above 1.
		t.Setenv(fakeDiffExitEnv, "3")
		if code, _, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "web", base)); code != 3 {
			t.Errorf("exit %d, stderr %q; want the program's 3", code, errOut)
		}
		t.Setenv(fakeDiffExitEnv, "")
		if code, out, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "web", base)); code != 0 || readFakeDiff(t, record).Differ {
			t.Errorf("no change: exit %d, stdout %q, stderr %q; want 0 and equal directories", code, out, errOut)
		}
	})

	t.Run("kubectl flags", func(t *testing.T) {
		file := writeCR(t, ns, "web", base)
		// --as: the API server answers for that user, who has no rights.
		code, out, errOut := swaCluster(t, "diff", "-f", file, "--as", "nobody")
		if code != 2 || out != "" || !strings.Contains(errOut, `User "nobody" cannot get resource "simplewebapps" in API group "example.com"`) {
			t.Errorf("--as nobody: exit %d, stdout %q, stderr %q; want exit 2 and nobody's 403", code, out, errOut)
		}
		code, _, errOut = swaCluster(t, "diff", "-f", file, "--as", "nobody", "--as-group", "system:masters")
		if code != 0 {
			t.Errorf("--as nobody --as-group system:masters: exit %d, stderr %q; want 0", code, errOut)
		}
		// --context picks a context other than the current (broken) one,
		// and its namespace is where a SimpleWebApp without one goes.
		kc := contextsKubeconfig(t, ns)
		noNS := writeCR(t, "", "web", base)
		if code, out, errOut := swa(t, "diff", "-f", noNS, "--kubeconfig", kc, "--context", "with-namespace"); code != 0 || out != "" {
			t.Errorf("--context with-namespace: exit %d, stdout %q, stderr %q; want no change in %s", code, out, errOut, ns)
		}
		if code, _, errOut := swa(t, "diff", "-f", noNS, "--kubeconfig", kc, "--request-timeout", "5s"); code != 2 || !strings.Contains(errOut, "127.0.0.1:1") {
			t.Errorf("the broken current context: exit %d, stderr %q; want exit 2 and its server", code, errOut)
		}
		// -n other than the file's namespace is refused, as by kubectl.
		if code, _, errOut := swaCluster(t, "diff", "-f", file, "-n", "default"); code != 2 || !strings.Contains(errOut, "You must pass '--namespace="+ns+"'") {
			t.Errorf("-n default for a file in %s: exit %d, stderr %q", ns, code, errOut)
		}
	})

	t.Run("not owned", func(t *testing.T) {
		// A Service with the name a new SimpleWebApp "taken" would render:
		// the operator never adopts it, and diff says so.
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-web"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		if err := env.Client.Create(t.Context(), svc); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := swaCluster(t, "diff", "-f", writeCR(t, ns, "taken", "replicas: 1"))
		if code <= 1 || !strings.Contains(errOut, "refused: ObjectNotOwned: Service taken-web exists and is not controlled") {
			t.Errorf("exit %d, stderr %q; want exit > 1 and ObjectNotOwned", code, errOut)
		}
		before["*v1.Service/taken-web"] = ""
	})

	after := resourceVersions(t, ns)
	for k, v := range after {
		if want, ok := before[k]; !ok || (want != "" && want != v) {
			t.Errorf("%s changed (resourceVersion %q -> %q): diff must not write", k, want, v)
		}
	}
}

// versions lists every channel with its newest version and, for a
// SimpleWebApp in the cluster, which version it would move to and why.
func TestVersions(t *testing.T) {
	code, out, errOut := swa(t, "versions")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, ch := range testkit.ChannelNames(t) {
		if !regexp.MustCompile(`(?m)^` + ch + `\s+` + regexp.QuoteMeta(testkit.ChannelVersion(t, ch)) + `\s`).MatchString(out) {
			t.Errorf("no line for channel %s with newest %s:\n%s", ch, testkit.ChannelVersion(t, ch), out)
		}
	}
	if !strings.Contains(out, "PACKAGE simplewebapp: "+strings.Join(testkit.Versions(t), ", ")+"\n") {
		t.Errorf("package versions %v not listed:\n%s", testkit.Versions(t), out)
	}

	// Withdrawn versions are listed, and a channel's newest skips them.
	dir := t.TempDir()
	rapid := testkit.ChannelVersion(t, "rapid")
	testkit.WriteChannelFile(t, testkit.DirTree(dir), render.WithdrawnFile, "withdrawn:\n- {name: simplewebapp, version: "+rapid+", reason: too wide}\n")
	code, out, errOut = swa(t, "versions", "--channels-dir", dir)
	if want := "WITHDRAWN " + rapid + ": too wide\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d (%s); output lacks %q:\n%s", code, errOut, want, out)
	}
	code, out, _ = swa(t, "versions", "--offline", "--channels-dir", dir, "-f", writeCR(t, "default", "web", "channel: rapid"))
	if code != 0 || !strings.Contains(out, "desired:  ") || strings.Contains(out, "desired:  "+rapid+":") {
		t.Errorf("exit %d; want a desired version other than the withdrawn %s:\n%s", code, rapid, out)
	}

	ns := testkit.Namespace(t, env.Client, testkit.NS{Prefix: "plugin-", Keep: true})
	stable := testkit.ChannelVersion(t, "stable")
	deployed(t, writeCR(t, ns, "web", "channel: stable"))
	code, out, errOut = swaCluster(t, "versions", "-f", writeCR(t, ns, "web", "channel: rapid"))
	t.Logf("kubectl swa versions -f (channel rapid), exit %d:\n%s%s", code, errOut, out)
	wants := []string{
		fmt.Sprintf("  running:  %s (from channel \"stable\"), Ready=True Available\n", stable),
		fmt.Sprintf("  desired:  %s: newest in channel \"rapid\"\n", rapid),
	}
	if stable != rapid {
		wants = append(wants, fmt.Sprintf("  would:    move %s -> %s (", stable, rapid))
	}
	for _, want := range wants {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d; output lacks %q", code, want)
		}
	}
	_, out, _ = swaCluster(t, "versions", "-f", writeCR(t, ns, "other", "version: 99.0.0"))
	if !strings.Contains(out, "  running:  nothing (not in the cluster)\n") || !strings.Contains(out, "stall: VersionNotFound: version 99.0.0") {
		t.Errorf("an unknown version is not reported as a stall:\n%s", out)
	}
}

// After a rollback the reconciler holds the failed version back for the same
// spec; diff and versions pick the version it would, and say why.
func TestHeldBackAfterRollback(t *testing.T) {
	ns := testkit.Namespace(t, env.Client, testkit.NS{Prefix: "plugin-", Keep: true})
	// Two pinned versions, the newer one failing to roll out. Not the
	// channels' versions: a promotion may put both channels at one version.
	vs := testkit.Versions(t)
	if len(vs) < 2 {
		t.Fatalf("needs two package versions, has %v", vs)
	}
	good, failing := vs[len(vs)-2], vs[len(vs)-1]
	deployed(t, writeCR(t, ns, "held", "version: "+good+"\n  upgradeTimeout: 5s"))
	upgrade := writeCR(t, ns, "held", "version: "+failing+"\n  upgradeTimeout: 5s")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		app := &webappv1.SimpleWebApp{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "held"}, app); err != nil {
			return err
		}
		app.Spec.Version = failing
		return env.Client.Update(t.Context(), app)
	})
	if err != nil {
		t.Fatal(err)
	}
	app := &webappv1.SimpleWebApp{}
	testkit.WaitFor(t, timeout, "rolled back to "+good, func(ctx context.Context) (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "held"}, app); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(app.Status.Conditions, webappv1.ConditionStalled)
		return c != nil && c.Reason == webappv1.ReasonRolledBack && c.ObservedGeneration == app.Generation, fmt.Sprintf("%+v", app.Status.Conditions)
	})
	// The old version rolls out again; what only the new one had is pruned.
	if err := env.MarkRolledOut(t.Context(), ns, "held-web"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, timeout, "inventory of "+good+" only", func(ctx context.Context) (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "held"}, app); err != nil {
			return false, err.Error()
		}
		for _, ref := range app.Status.Inventory {
			if ref.Kind == "PodDisruptionBudget" {
				return false, fmt.Sprint(app.Status.Inventory)
			}
		}
		return true, ""
	})

	code, out, errOut := swaCluster(t, "diff", "-f", upgrade)
	wantWhy := fmt.Sprintf("version %s (pinned by spec.version, but %s was rolled back (", good, failing)
	if code != 0 || out != "" || !strings.Contains(errOut, wantWhy) {
		t.Errorf("diff of the rolled-back spec: exit %d (want 0), stdout %q, stderr %q (want %q)", code, out, errOut, wantWhy)
	}
	code, out, _ = swaCluster(t, "versions", "-f", upgrade)
	t.Logf("kubectl swa versions -f (after a rollback), exit %d:\n%s", code, out)
	if code != 0 || !strings.Contains(out, "  would:    stay at "+good+"\n") || !strings.Contains(out, "was rolled back") {
		t.Errorf("versions does not say %s stays after the rollback of %s", good, failing)
	}
	// A new spec is a new generation: the held-back version is tried again.
	code, _, errOut = swaCluster(t, "diff", "-f", writeCR(t, ns, "held", "version: "+failing+"\n  upgradeTimeout: 6s"))
	if code != 1 || !strings.Contains(errOut, "version "+failing+" (pinned by spec.version)") {
		t.Errorf("a new spec: exit %d, stderr %q; want %s tried again", code, errOut, failing)
	}
}
