package install_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

// seedSample is the user's first example, a verbatim copy of the seed
// manifest handed over with the project (nothing outside the clone is read:
// CI runs on a clean clone).
const seedSample = "config/samples/my-webapp.yaml"

// TestInstallYAML installs the release artifact as a user without a checkout
// would: `kubectl apply --server-side -f dist/install.yaml` (made by make
// build-installer) into a fresh full cluster. Everything is admitted, the
// namespace enforces restricted and the installed Deployment's pods are
// admitted there. kwok runs no container, so the operator then runs as a
// local process with a token of the ServiceAccount that install.yaml created
// (nothing else grants it anything) and the same flags as the Deployment's:
// the seed sample becomes Ready, and the operator says its version (log line,
// simplewebapp_build_info).
func TestInstallYAML(t *testing.T) {
	installYAML := buildInstaller(t, "")
	path := filepath.Join(t.TempDir(), "install.yaml")
	if err := os.WriteFile(path, installYAML, 0o644); err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile(filepath.Join(repoRoot, seedSample))
	if err != nil {
		t.Fatalf("the seed sample: %v", err)
	}
	go func() { _, _ = releaseBin() }() // builds while the cluster starts

	// A cluster of its own: config/default's objects and names are the ones
	// TestKustomizeInstall deploys in the package's shared cluster.
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
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	t0 = time.Now()
	out, warnings, err := kubectl(t, c, nil, "apply", "--server-side", "-f", path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(warnings) != "" {
		t.Errorf("kubectl apply warnings:\n%s", warnings)
	}
	if n := strings.Count(out, "serverside-applied"); n != len(wantDefault) {
		t.Errorf("kubectl apply: %d objects applied, want %d:\n%s", n, len(wantDefault), out)
	}
	if _, _, err := kubectl(t, c, nil, "wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=120s"); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE kubectl apply --server-side -f install.yaml (%d objects) and CRD Established: %s", len(wantDefault), time.Since(t0).Round(time.Millisecond))

	// The installed Deployment's pods run in the restricted namespace; its
	// template is admitted by a server-side dry run where restricted is
	// enforced, and any weakening of it is not.
	checkRunning(t, c, cs, namespace, deploymentName, serviceAccount, metricsService, managerRole)
	checkRestrictedEnforced(t, cs, namespace, deploymentName)
	dep, err := cs.AppsV1().Deployments(namespace).Get(t.Context(), deploymentName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != defaultImage(t) {
		t.Errorf("installed image %q, want %q", got, defaultImage(t))
	}

	// The operator as the installed ServiceAccount, with the Deployment's
	// flags (addresses on loopback; the Lease in the install's namespace,
	// which a pod would default to).
	env := &operatortest.Env{Root: repoRoot, Dir: t.TempDir(), Cluster: c, CS: cs}
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), serviceAccount, tokenRequest(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.TokenKubeconfig(serviceAccount, tok.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	if who, _, err := kubectl(t, c, nil, "--kubeconfig="+kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || who != "system:serviceaccount:"+namespace+":"+serviceAccount {
		t.Fatalf("the operator's kubeconfig authenticates as %q (%v)", who, err)
	}
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	var args []string
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			// Plain HTTP for this scrape; the secure endpoint is tests/operations'.
			args = append(args, "--metrics-bind-address="+metricsAddr, "--metrics-secure=false")
		case strings.HasPrefix(a, "--health-probe-bind-address="): // Start picks a free one
		default:
			args = append(args, a)
		}
	}
	args = append(args, "--leader-election-namespace="+namespace)
	op, err := operatortest.Start(operatortest.Config{
		Name: "installed", Bin: releaseOperator(t), Kubeconfig: kubeconfig, Args: args,
		LogPath: filepath.Join(env.Dir, "operator.log"), OutOfCluster: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := op.Stop(30 * time.Second); err != nil {
			op.Kill()
			t.Errorf("%v\n%s", err, op.LogTail(20))
		}
	})
	logs := testkit.Diag(func() string { return "--- operator log ---\n" + op.LogTail(40) })
	if err := op.WaitReady(t.Context(), 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, op.LogTail(40))
	}

	ns := testkit.Namespace(t, cl, testkit.NS{Prefix: "seed-", PodSecurity: "restricted", WaitForServiceAccount: true})
	t0 = time.Now()
	if _, _, err := kubectl(t, c, sample, "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 3*time.Minute, "the seed sample my-webapp Ready under the installed operator", func(ctx context.Context) (bool, string) {
		out, _, err := kubectl(t, c, nil, "get", "-n", ns, "swa", "my-webapp", "-o",
			`jsonpath={.status.readyReplicas}/{.spec.replicas} Ready={.status.conditions[?(@.type=="Ready")].status}: {.status.conditions[?(@.type=="Ready")].message}`)
		return err == nil && strings.Contains(out, "3/3 Ready=True"), fmt.Sprint(out, err)
	}, testkit.Every(100*time.Millisecond), logs)
	t.Logf("FIGURE seed sample Ready under the installed ServiceAccount: %s", time.Since(t0).Round(time.Millisecond))
	if _, _, err := kubectl(t, c, nil, "wait", "-n", ns, "--for=condition=Ready", "swa/my-webapp", "--timeout=10s"); err != nil {
		t.Error(err)
	}
	// It wrote the children itself: the Deployment's fields are its manager's.
	web, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "my-webapp-web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managers := map[string]bool{}
	for _, f := range web.ManagedFields {
		managers[f.Manager] = true
	}
	if !managers[render.ManagerName] {
		t.Errorf("field managers of my-webapp-web: %v, want %s among them", managers, render.ManagerName)
	}

	// It says which build it is.
	if !strings.Contains(op.LogLinesWith(`"version":"`+projectVersion(t)+`"`, 5), "simplewebapp-operator") {
		t.Errorf("no start-up log line with version %s:\n%s", projectVersion(t), op.LogTail(20))
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	info := regexp.MustCompile(`(?m)^simplewebapp_build_info\{.*\} 1$`).FindString(string(body))
	for _, want := range []string{`,version="` + projectVersion(t) + `"`, `revision="`, `goversion="go`} {
		if !strings.Contains(info, want) {
			t.Errorf("simplewebapp_build_info %q lacks %s", info, want)
		}
	}
	t.Logf("%s", info)
	if !strings.Contains(op.LogLinesWith("Successfully acquired lease", 1), `"lock":"`+namespace+`/`) {
		t.Errorf("the operator did not take the Lease in %s:\n%s", namespace, op.LogTail(20))
	}
}

func tokenRequest() *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
}
