// Package upgrade_test upgrades the operator itself, from the previous release
// (testdata/v0.2.0.tar.gz: its source, config/default and Helm chart) to this
// build, the two ways a user would: `kubectl apply --server-side -f
// dist/install.yaml` over the old install, and `helm upgrade` over the old
// chart. SimpleWebApps made by the old operator must go through it untouched:
// Ready all along, no pod template change (no roll of the users' pods), no
// spec field lost.
package upgrade_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/hack/install"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

const (
	oldVersion     = "0.2.0"
	fixture        = "testdata/v" + oldVersion + ".tar.gz"
	namespace      = "simplewebapp-system"
	serviceAccount = "simplewebapp-controller-manager"
	deploymentName = "simplewebapp-controller-manager"
	release        = "simplewebapp" // the chart's names then equal config/default's
	appsNS         = "apps"
)

var (
	root    string // this repository
	tmpDir  string // removed by TestMain
	oldRoot string // the previous release's tree, from the fixture

	oldBin, newBin func() (string, error)
	swaGVR         = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "simplewebapps"}
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard()) // the clients' logs say nothing the test needs
	var err error
	if root, err = localcluster.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if tmpDir, err = os.MkdirTemp("", "swa-upgrade-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpDir)
	oldRoot = filepath.Join(tmpDir, "v"+oldVersion)
	if err := untar(filepath.Join(root, "tests/install/upgrade", fixture), oldRoot); err != nil {
		fmt.Fprintln(os.Stderr, "the previous release's fixture:", err)
		return 1
	}
	// Both operators build while the first cluster starts.
	oldBin = build("old", oldRoot, "go", "build", "-o", filepath.Join(tmpDir, "old", "simplewebapp-operator"), ".")
	newBin = build("new", root, "bash", "hack/build.sh", filepath.Join(tmpDir, "new"))
	return m.Run()
}

// build runs a build in the background; the function it returns waits for it
// and gives the binary.
func build(which, dir string, name string, args ...string) func() (string, error) {
	done := make(chan error, 1)
	go func() {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off")
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("building the %s operator (%s %s in %s): %v\n%s", which, name, strings.Join(args, " "), dir, err, out)
		} else if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "FIGURE %s operator built in %s\n", which, time.Since(t0).Round(time.Millisecond))
		}
		done <- err
	}()
	return sync.OnceValues(func() (string, error) {
		if err := <-done; err != nil {
			return "", err
		}
		return filepath.Join(tmpDir, which, "simplewebapp-operator"), nil
	})
}

func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name)) // no way out of dir
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var b []byte
				if b, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, b, 0o644)
				}
			}
		}
		if err != nil {
			return err
		}
	}
}

// env is one full cluster with admin clients, the cluster's kubectl and helm.
type env struct {
	*operatortest.Env
	dyn     dynamic.Interface
	cl      client.Client
	helmBin string
	op      *operatortest.Operator
}

func newEnv(t *testing.T) *env {
	t.Helper()
	t0 := time.Now()
	c, err := localcluster.Start(t.Context(), localcluster.Options{Profile: localcluster.ProfileFull})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	t.Logf("full cluster ready in %s", time.Since(t0).Round(time.Millisecond))
	binDir, err := localcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{Env: &operatortest.Env{Root: root, Dir: t.TempDir(), Name: "upgrade", Cluster: c}, helmBin: filepath.Join(binDir, "helm")}
	e.Kubectl = &operatortest.Kubectl{Bin: filepath.Join(binDir, "kubectl"), CacheDir: filepath.Join(e.Dir, "kubectl-cache"), AdminKubeconfig: c.Kubeconfig}
	if e.CS, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	if e.cl, err = client.New(c.RESTConfig(), client.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e.op != nil {
			e.op.Kill()
		}
	})
	return e
}

func (e *env) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.Kubectl.Admin(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) helm(t *testing.T, args ...string) string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), e.helmBin, append(args, "--kubeconfig", e.Cluster.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *env) waitCRD(t *testing.T) {
	t.Helper()
	e.kubectl(t, "wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=120s")
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startOperator runs bin as the installed ServiceAccount (a TokenRequest
// token is its only credential) with the installed Deployment's flags: kwok
// runs no container, so the operator runs here, as the pod would.
func (e *env) startOperator(t *testing.T, which, bin string) *operatortest.Operator {
	t.Helper()
	dep, err := e.CS.AppsV1().Deployments(namespace).Get(t.Context(), deploymentName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := e.CS.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := e.TokenKubeconfig(which+"-operator", tok.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	// The authorizer sees new bindings through an informer.
	if err := e.Kubectl.WaitCanI(t.Context(), time.Minute,
		operatortest.CanIWant{Kubeconfig: kubeconfig, Args: []string{"watch", "simplewebapps.example.com", "--all-namespaces"}, Want: "yes"},
		operatortest.CanIWant{Kubeconfig: kubeconfig, Args: []string{"update", "leases.coordination.k8s.io", "-n", namespace}, Want: "yes"},
	); err != nil {
		t.Fatal(err)
	}
	args := []string{"--leader-election-namespace=" + namespace, "--metrics-bind-address=0"}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if !strings.HasPrefix(a, "--metrics-bind-address=") && !strings.HasPrefix(a, "--health-probe-bind-address=") {
			args = append(args, a)
		}
	}
	op, err := operatortest.Start(operatortest.Config{
		Name: which, Bin: bin, Kubeconfig: kubeconfig, Args: args,
		LogPath: filepath.Join(e.Dir, which+"-operator.log"), OutOfCluster: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.op = op
	if err := op.WaitReady(t.Context(), 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, op.LogTail(40))
	}
	t.Logf("%s operator running (image %s, args %q)", which, dep.Spec.Template.Spec.Containers[0].Image, args)
	return op
}

// apps are SimpleWebApps that use every spec field the previous release has.
const apps = `
apiVersion: example.com/v1
kind: SimpleWebApp
metadata: {name: my-webapp}
spec: {replicas: 3, message: "Welcome to my awesome web app!"}
---
apiVersion: example.com/v1
kind: SimpleWebApp
metadata: {name: pinned}
spec: {replicas: 2, message: "pinned to 1.0.0", version: "1.0.0", upgradeTimeout: 10m}
---
apiVersion: example.com/v1
kind: SimpleWebApp
metadata: {name: rapid}
spec: {replicas: 2, message: "on the rapid channel", channel: rapid}
---
apiVersion: example.com/v1
kind: SimpleWebApp
metadata: {name: tuned}
spec:
  replicas: 1
  message: "another tag of the image and a patch"
  image: docker.io/nginxinc/nginx-unprivileged:1.27.5-alpine # the shipped --allowed-images lets only this repository through
  patches:
  - target: {kind: Deployment, name: web}
    patch: |
      spec:
        template:
          spec:
            containers:
            - name: web
              resources:
                limits: {memory: 96Mi}
---
apiVersion: example.com/v1
kind: SimpleWebApp
metadata: {name: autoscaled}
spec:
  message: "an HPA owns the pod count"
  autoscaling: {minReplicas: 2, maxReplicas: 4, targetCPUUtilizationPercentage: 70}
`

func appNames() []string { return []string{"autoscaled", "my-webapp", "pinned", "rapid", "tuned"} }

// snapshot is what must not change for one app across the upgrade.
type snapshot struct {
	spec           map[string]any
	version        string // status.version: the package version it runs
	generation     int64
	template       any // the Deployment's .spec.template
	depGeneration  int64
	replicaSets    []string // name=pod-template-hash, every one the Deployment owns
	pods           []string // name/uid
	serviceUID     string
	depAnnotations map[string]string
}

func (e *env) snapshot(t *testing.T) map[string]snapshot {
	t.Helper()
	ctx := t.Context()
	out := map[string]snapshot{}
	for _, name := range appNames() {
		swa, err := e.dyn.Resource(swaGVR).Namespace(appsNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec, _, _ := unstructured.NestedMap(swa.Object, "spec")
		dep, err := e.dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(appsNS).Get(ctx, name+"-web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tmpl, _, _ := unstructured.NestedFieldCopy(dep.Object, "spec", "template")
		version, _, _ := unstructured.NestedString(swa.Object, "status", "version")
		s := snapshot{spec: spec, version: version, generation: swa.GetGeneration(), template: tmpl, depGeneration: dep.GetGeneration(), depAnnotations: dep.GetAnnotations()}
		rss, err := e.CS.AppsV1().ReplicaSets(appsNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range rss.Items {
			if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == dep.GetUID() {
				s.replicaSets = append(s.replicaSets, rs.Name+"="+rs.Labels["pod-template-hash"])
			}
		}
		pods, err := e.CS.CoreV1().Pods(appsNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			s.pods = append(s.pods, p.Name+"/"+string(p.UID))
		}
		svc, err := e.CS.CoreV1().Services(appsNS).Get(ctx, name+"-web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.serviceUID = string(svc.UID)
		sort.Strings(s.replicaSets)
		sort.Strings(s.pods)
		out[name] = s
	}
	return out
}

// readiness reports, per app, "Ready=True" or what it sees instead.
func (e *env) readiness(ctx context.Context) (bool, string) {
	list, err := e.dyn.Resource(swaGVR).Namespace(appsNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	var seen []string
	ready := 0
	for _, o := range list.Items {
		s := readyOf(&o)
		if s == "True" {
			ready++
		}
		seen = append(seen, o.GetName()+": Ready="+s)
	}
	sort.Strings(seen)
	return ready == len(appNames()) && len(list.Items) == len(appNames()), strings.Join(seen, "; ")
}

func readyOf(o *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			gen, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
			s := fmt.Sprint(m["status"])
			if s != "True" {
				s += " (" + fmt.Sprint(m["reason"]) + ": " + fmt.Sprint(m["message"]) + ")"
			} else if gen != o.GetGeneration() {
				s = fmt.Sprintf("True for generation %d of %d", gen, o.GetGeneration())
			}
			return s
		}
	}
	return "absent"
}

// watchReady records every change of the apps in which one is not Ready, from
// now until the returned function is called; that returns them.
func (e *env) watchReady(t *testing.T) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	list, err := e.dyn.Resource(swaGVR).Namespace(appsNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		broken []string
		events int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := list.GetResourceVersion()
		for ctx.Err() == nil {
			w, err := e.dyn.Resource(swaGVR).Namespace(appsNS).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if ctx.Err() == nil {
					mu.Lock()
					broken = append(broken, "watch: "+err.Error())
					mu.Unlock()
				}
				return
			}
			for ev := range w.ResultChan() {
				o, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = o.GetResourceVersion()
				if ev.Type == "BOOKMARK" {
					continue
				}
				mu.Lock()
				events++
				if s := readyOf(o); s != "True" || ev.Type == "DELETED" {
					broken = append(broken, fmt.Sprintf("%s %s %s: Ready=%s", time.Now().Format("15:04:05.000"), ev.Type, o.GetName(), s))
				}
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%d changes of the SimpleWebApps watched during the upgrade", events)
		return broken
	}
}

// requestReconcile asks the running operator to handle every app now and
// waits until it has (status.lastHandledReconcileAt echoes the request, a
// field the previous release did not have) with the app Ready: the upgraded
// operator has been through each of them.
func (e *env) requestReconcile(t *testing.T) {
	t.Helper()
	token := fmt.Sprintf("upgrade-%d", time.Now().UnixNano())
	for _, name := range appNames() {
		e.kubectl(t, "annotate", "-n", appsNS, "swa", name, "--overwrite", "simplewebapp.example.com/reconcile-requested-at="+token)
	}
	testkit.WaitFor(t, 2*time.Minute, "the new operator to handle every app (lastHandledReconcileAt) and each Ready", func(ctx context.Context) (bool, string) {
		list, err := e.dyn.Resource(swaGVR).Namespace(appsNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		handled := 0
		var seen []string
		for _, o := range list.Items {
			got, _, _ := unstructured.NestedString(o.Object, "status", "lastHandledReconcileAt")
			if got == token && readyOf(&o) == "True" {
				handled++
			}
			seen = append(seen, fmt.Sprintf("%s: handled %q Ready=%s", o.GetName(), got, readyOf(&o)))
		}
		return handled == len(appNames()), strings.Join(seen, "; ")
	}, testkit.Every(100*time.Millisecond), testkit.Diag(func() string { return "--- operator log ---\n" + e.op.LogTail(30) }))
}

// compare checks that the upgrade changed nothing that matters. The moved
// apps (name: the version this build's channels give them) must run that
// version now; their pods rolled to it.
func compare(t *testing.T, before, after map[string]snapshot, moved map[string]string) {
	t.Helper()
	for _, name := range appNames() {
		b, a := before[name], after[name]
		if want, ok := moved[name]; ok {
			if a.version != want || a.generation != b.generation || a.serviceUID != b.serviceUID || len(lostFields(b.spec, a.spec, "spec")) > 0 {
				t.Errorf("%s: moved by this build's channels: version %s (want %s), generation %d → %d, Service kept %t, spec fields lost %v",
					name, a.version, want, b.generation, a.generation, a.serviceUID == b.serviceUID, lostFields(b.spec, a.spec, "spec"))
			}
			continue
		}
		for _, path := range lostFields(b.spec, a.spec, "spec") {
			t.Errorf("%s: %s lost or changed: before %s", name, path, path)
		}
		if added := lostFields(a.spec, b.spec, "spec"); len(added) > 0 {
			t.Logf("%s: fields the new CRD defaults: %v", name, added)
		}
		if a.generation != b.generation {
			t.Errorf("%s: the SimpleWebApp's generation went from %d to %d", name, b.generation, a.generation)
		}
		if !reflect.DeepEqual(a.template, b.template) {
			by, _ := yaml.Marshal(b.template)
			ay, _ := yaml.Marshal(a.template)
			t.Errorf("%s: the pod template changed (the pods roll):\n--- before\n%s--- after\n%s", name, by, ay)
		}
		if !slices.Equal(a.replicaSets, b.replicaSets) {
			t.Errorf("%s: ReplicaSets %v, before %v", name, a.replicaSets, b.replicaSets)
		}
		if !slices.Equal(a.pods, b.pods) {
			t.Errorf("%s: pods %v, before %v", name, a.pods, b.pods)
		}
		if a.serviceUID != b.serviceUID {
			t.Errorf("%s: the Service was recreated", name)
		}
		if a.depGeneration != b.depGeneration {
			var changed []string
			for k, v := range a.depAnnotations {
				if b.depAnnotations[k] != v {
					changed = append(changed, fmt.Sprintf("%s: %q → %q", k, b.depAnnotations[k], v))
				}
			}
			t.Logf("%s: the Deployment's generation %d → %d (pod template unchanged); annotations changed: %v", name, b.depGeneration, a.depGeneration, changed)
		}
	}
}

// lostFields lists the leaf paths of before that after lacks or holds with
// another value.
func lostFields(before, after any, path string) []string {
	switch b := before.(type) {
	case map[string]any:
		a, ok := after.(map[string]any)
		if !ok {
			return []string{path}
		}
		var out []string
		for k, v := range b {
			out = append(out, lostFields(v, a[k], path+"."+k)...)
		}
		sort.Strings(out)
		return out
	case []any:
		a, ok := after.([]any)
		if !ok || len(a) != len(b) {
			return []string{path}
		}
		var out []string
		for i := range b {
			out = append(out, lostFields(b[i], a[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	default:
		if !reflect.DeepEqual(before, after) {
			return []string{path}
		}
		return nil
	}
}

// upgrade runs the scenario: install the previous release (installOld), run
// its operator, create the apps and wait until they are Ready; then upgrade
// the install (upgradeInstall), replace the operator process by this build,
// and check the apps went through untouched.
func upgrade(t *testing.T, installOld, upgradeInstall func(t *testing.T, e *env)) {
	t0 := time.Now()
	e := newEnv(t)
	installOld(t, e)
	e.waitCRD(t)
	bin, err := oldBin()
	if err != nil {
		t.Fatal(err)
	}
	old := e.startOperator(t, "old", bin)
	if !strings.Contains(old.LogTail(100), "starting manager") {
		t.Fatalf("the old operator did not start:\n%s", old.LogTail(40))
	}
	testkit.Namespace(t, e.cl, testkit.NS{Name: appsNS, PodSecurity: "restricted", WaitForServiceAccount: true, Keep: true})
	e.kubectl(t, "apply", "-n", appsNS, "-f", writeFile(t, "apps.yaml", []byte(apps)))
	testkit.WaitFor(t, 3*time.Minute, "every app Ready under the "+oldVersion+" operator", e.readiness,
		testkit.Every(200*time.Millisecond), testkit.Diag(func() string { return "--- old operator log ---\n" + old.LogTail(30) }))
	before := e.snapshot(t)
	// A release that also promotes a version in a channel moves the apps on
	// that channel to it: a channel move, which rolls their pods by design
	// (tested elsewhere). The operator upgrade itself must roll nothing:
	// every other app is held to that.
	moved := map[string]string{}
	for _, name := range appNames() {
		want, _ := before[name].spec["version"].(string)
		if want == "" {
			channel, _ := before[name].spec["channel"].(string)
			if channel == "" {
				channel = "stable"
			}
			want = testkit.ChannelVersion(t, channel)
		}
		if want != before[name].version {
			moved[name] = want
		}
	}
	if len(moved) > 0 {
		t.Logf("this build's channels move %v (app: version): their pods roll to it, the others' must not", moved)
	}
	stopWatch := e.watchReady(t)

	t1 := time.Now()
	upgradeInstall(t, e)
	e.waitCRD(t)
	// The Deployment's new pods replace the old operator's: here, the
	// processes.
	if err := old.Stop(30 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, old.LogTail(20))
	}
	bin, err = newBin()
	if err != nil {
		t.Fatal(err)
	}
	dep, err := e.CS.AppsV1().Deployments(namespace).Get(t.Context(), deploymentName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+version(t)) {
		t.Errorf("the upgraded install runs image %s, want tag %s", img, version(t))
	}
	cur := e.startOperator(t, "new", bin)
	e.requestReconcile(t)
	t.Logf("FIGURE upgrade (install, operator switch, every app handled by the new operator): %s", time.Since(t1).Round(time.Millisecond))
	// A late write would still show: nothing moves for a few seconds more.
	testkit.HoldsFor(t, 5*time.Second, "the apps' ReplicaSets and pods unchanged", func(context.Context) (bool, string) {
		now := e.snapshot(t)
		for _, name := range appNames() {
			if _, ok := moved[name]; ok {
				continue
			}
			if !slices.Equal(now[name].replicaSets, before[name].replicaSets) || !slices.Equal(now[name].pods, before[name].pods) {
				return false, fmt.Sprintf("%s: ReplicaSets %v pods %v; before %v %v", name, now[name].replicaSets, now[name].pods, before[name].replicaSets, before[name].pods)
			}
		}
		return true, ""
	}, testkit.Every(500*time.Millisecond))
	broken := slices.DeleteFunc(stopWatch(), func(line string) bool {
		for name := range moved {
			if strings.Contains(line, " "+name+": Ready=") {
				return true // Ready=False while it moves to the new version
			}
		}
		return false
	})
	if len(broken) > 0 {
		t.Errorf("an app was not Ready during the upgrade:\n  %s\n--- new operator log ---\n%s", strings.Join(broken, "\n  "), cur.LogTail(30))
	}
	compare(t, before, e.snapshot(t), moved)
	if !strings.Contains(cur.LogLinesWith(`"version":"`+version(t)+`"`, 3), "simplewebapp-operator") {
		t.Errorf("the new operator does not log version %s:\n%s", version(t), cur.LogTail(20))
	}
	t.Logf("FIGURE whole scenario: %s", time.Since(t0).Round(time.Millisecond))
}

// TestUpgradeWithInstallYAML: the previous release's config/default applied
// with kubectl, then this build's dist/install.yaml over it.
func TestUpgradeWithInstallYAML(t *testing.T) {
	upgrade(t, func(t *testing.T, e *env) {
		oldYAML, err := install.Kustomize(filepath.Join(oldRoot, "config", "default"), install.ImageName+":"+oldVersion)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", e.kubectl(t, "apply", "--server-side", "-f", writeFile(t, "old-install.yaml", oldYAML)))
	}, func(t *testing.T, e *env) {
		out := filepath.Join(t.TempDir(), "install.yaml")
		cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "build-installer", "INSTALLER="+out)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make build-installer: %v\n%s", err, b)
		}
		t.Logf("%s", e.kubectl(t, "apply", "--server-side", "-f", out))
	})
}

// TestUpgradeWithHelm: the previous release's chart installed with helm, then
// `helm upgrade --reset-values` to this chart, the new CRD applied first (Helm never
// upgrades what is in crds/; docs/install.md).
func TestUpgradeWithHelm(t *testing.T) {
	upgrade(t, func(t *testing.T, e *env) {
		testkit.Namespace(t, e.cl, testkit.NS{Name: namespace, PodSecurity: "restricted", Keep: true})
		t.Logf("%s", e.helm(t, "install", release, filepath.Join(oldRoot, "config/helm/simplewebapp-operator"),
			"--namespace", namespace, "--set", "image.tag="+oldVersion))
	}, func(t *testing.T, e *env) {
		chart := filepath.Join(root, "config/helm/simplewebapp-operator")
		t.Logf("%s", e.kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(chart, "crds")))
		// Given no values, helm upgrade reuses the release's, the old
		// image.tag included: --reset-values takes the new chart's defaults
		// (the tag is its appVersion).
		t.Logf("%s", e.helm(t, "upgrade", release, chart, "--namespace", namespace, "--reset-values"))
	})
}

func version(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
