// Package helm tests the Helm chart config/helm/simplewebapp-operator with
// the helm CLI built by hack/tools/build.sh: its values schema rejects bad
// values, each toggle renders what it says, every object has the standard
// labels, the chart works as a subchart with `global` values and with an
// existing ServiceAccount, the copies of generated files and the README's
// values table are current, `helm lint --strict` passes, and on a full
// local cluster `helm install` works (the umbrella chart's too), the
// installed operator (run as a local process with the installed
// ServiceAccount's token: kwok runs no containers) makes a SimpleWebApp
// Ready, and `helm test` passes, and fails once the operator has no Ready
// pod.
package helm_test

import (
	"bytes"
	"context"
	"example.com/simplewebapp-operator/internal/testkit"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	sigsyaml "sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
)

const chartDir = "config/helm/simplewebapp-operator"

var (
	repoRoot string
	cleanups operatortest.Cleanups

	shared struct {
		once sync.Once
		env  *operatortest.Env
		err  error
	}
)

func TestMain(m *testing.M) {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard()) // the tests' own clients log nothing
	var err error
	if repoRoot, err = localcluster.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanups.Run()
	os.Exit(code)
}

// clusterEnv is the package's full local cluster, without the CRD (helm
// install brings it), started by the first test that needs it.
func clusterEnv(t *testing.T) *operatortest.Env {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		shared.env, shared.err = operatortest.Setup(ctx, operatortest.Options{Name: "helm", NoCRD: true}, cleanups.Add)
		if shared.err == nil { // the build runs under ctx: wait for it
			_, shared.err = shared.env.OperatorBin()
		}
	})
	if shared.err != nil {
		t.Fatalf("setting up the cluster: %v", shared.err)
	}
	return shared.env
}

// helmBin is the helm CLI built by hack/tools/build.sh.
func helmBin(t *testing.T) string {
	t.Helper()
	dir, err := localcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("helm: %v (hack/tools/build.sh builds it: make tools)", err)
	}
	return p
}

// runHelm runs helm with a configuration of its own (nothing of the
// user's, nothing written to $HOME) and returns stdout and stderr.
func runHelm(t *testing.T, kubeconfig string, args ...string) (string, string, error) {
	t.Helper()
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	if kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// template renders the chart as release "swa" in namespace "operators" with
// the extra helm arguments (--set, -f), failing the test on an error.
func template(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, _, err := runHelm(t, "", append([]string{"template", "swa", chartDir, "--namespace", "operators"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, []byte(out))
}

// parse splits multi-document YAML into objects, skipping empty documents.
func parse(t *testing.T, data []byte) []*unstructured.Unstructured {
	return testkit.ParseYAML(t, data)
}

func key(u *unstructured.Unstructured) string {
	return testkit.ObjectKey(u)
}

func keys(objs []*unstructured.Unstructured) []string {
	return testkit.ObjectKeys(objs)
}

// find returns the object with kind, namespace and name, or nil.
func find(objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	return nil
}

// mustFind is find, failing the test without the object.
func mustFind(t *testing.T, objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	o := find(objs, kind, ns, name)
	if o == nil {
		t.Fatalf("no %s %s/%s among\n  %s", kind, ns, name, strings.Join(keys(objs), "\n  "))
	}
	return o
}

// as converts an object to its typed form.
func as[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	b, err := sigsyaml.Marshal(u.Object)
	if err == nil {
		err = sigsyaml.UnmarshalStrict(b, &v)
	}
	if err != nil {
		t.Fatalf("%s: %v", key(u), err)
	}
	return &v
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
