package install_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"example.com/simplewebapp-operator/internal/testkit"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/hack/install"
	"example.com/simplewebapp-operator/internal/localcluster"
)

// The names config/default installs (kubebuilder layout: namePrefix
// "simplewebapp-", namespace simplewebapp-system).
const (
	namespace      = "simplewebapp-system"
	deploymentName = "simplewebapp-controller-manager"
	serviceAccount = "simplewebapp-controller-manager"
	metricsService = "simplewebapp-controller-manager-metrics-service"
	managerRole    = "simplewebapp-manager-role"

	chartDir = "config/helm/simplewebapp-operator"
	// With this release name the chart's names equal config/default's.
	chartRelease = "simplewebapp"
)

var (
	repoRoot string
	tmpDir   string // removed by TestMain

	shared struct {
		once sync.Once
		c    *localcluster.Cluster
		cs   kubernetes.Interface
		cl   client.Client
		err  error
	}
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if repoRoot, err = localcluster.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if tmpDir, err = os.MkdirTemp("", "swa-install-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpDir)
	code := m.Run()
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
			code = 1
		}
	}
	return code
}

// fullCluster returns the package's full local cluster (controller-manager,
// scheduler, kwok nodes, Pod Security admission), started by the first test
// that needs it and stopped by TestMain, with admin clients.
func fullCluster(t *testing.T) (*localcluster.Cluster, kubernetes.Interface, client.Client) {
	t.Helper()
	shared.once.Do(func() {
		logw := io.Discard
		if testing.Verbose() {
			logw = os.Stderr
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a cold tools build included
		defer cancel()
		c, err := localcluster.Start(ctx, localcluster.Options{Profile: localcluster.ProfileFull, LogWriter: logw})
		if err != nil {
			shared.err = err
			return
		}
		shared.c = c
		if shared.cs, shared.err = kubernetes.NewForConfig(c.RESTConfig()); shared.err != nil {
			return
		}
		shared.cl, shared.err = client.New(c.RESTConfig(), client.Options{})
	})
	if shared.err != nil {
		t.Fatalf("starting the full cluster: %v", shared.err)
	}
	return shared.c, shared.cs, shared.cl
}

// tool returns the path of a binary built by hack/tools/build.sh.
func tool(t *testing.T, name string) string {
	t.Helper()
	dir, err := localcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (hack/tools/build.sh builds it: make tools; SWA_BIN_DIR=%q)", name, err, os.Getenv("SWA_BIN_DIR"))
	}
	return p
}

// kubectl runs the cluster's kubectl (never the one on PATH) as the cluster
// admin, with stdin, and returns stdout and stderr (warnings).
func kubectl(t *testing.T, c *localcluster.Cluster, stdin []byte, args ...string) (string, string, error) {
	t.Helper()
	full := append([]string{"--kubeconfig=" + c.Kubeconfig, "--cache-dir=" + filepath.Join(tmpDir, "kubectl-cache")}, args...)
	cmd := exec.CommandContext(t.Context(), tool(t, "kubectl"), full...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// helmTemplate renders the chart with the built helm CLI, CRDs included,
// without the `helm test` hook (tests/helm covers it).
func helmTemplate(t *testing.T, release, ns string, args ...string) []byte {
	t.Helper()
	full := append([]string{"template", release, filepath.Join(repoRoot, chartDir), "--namespace", ns, "--include-crds", "--skip-tests"}, args...)
	return []byte(helm(t, full...))
}

// helm runs the helm CLI built by hack/tools/build.sh and returns its stdout.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), tool(t, "helm"), args...)
	// Nothing of the user's helm configuration, and nothing written to $HOME.
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// kustomizeDefault renders config/default with the given image ("" keeps
// the default), the way make deploy does (hack/render).
func kustomizeDefault(t *testing.T, image string) []byte {
	t.Helper()
	out, err := kustomize(filepath.Join(repoRoot, "config", "default"), image)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// projectVersion is the VERSION file: the one version source.
func projectVersion(t *testing.T) string {
	t.Helper()
	v := strings.TrimSpace(string(readFile(t, "VERSION")))
	if v == "" {
		t.Fatal("VERSION is empty")
	}
	return v
}

// defaultImage is config/default's operator image: tagged with VERSION.
func defaultImage(t *testing.T) string { return install.ImageName + ":" + projectVersion(t) }

// parse splits multi-document YAML into objects, skipping empty documents.
func parse(t *testing.T, data []byte) []*unstructured.Unstructured {
	return testkit.ParseYAML(t, data)
}

// key names an object: Kind/namespace/name (namespace empty if cluster-scoped).
func key(u *unstructured.Unstructured) string {
	return testkit.ObjectKey(u)
}

func keys(objs []*unstructured.Unstructured) []string {
	return testkit.ObjectKeys(objs)
}

func index(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[key(o)] = o
	}
	return m
}

// find returns the object with kind and name, failing the test without one.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among %v", kind, name, keys(objs))
	return nil
}

// as converts an object to its typed form.
func as[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", key(u), err)
	}
	return &v
}

func toYAML(t *testing.T, objs ...*unstructured.Unstructured) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		y, err := sigsyaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes()
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
