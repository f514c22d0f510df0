package plugin

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
	"example.com/simplewebapp-operator/internal/version"
)

// Every command has help with examples (exit 0, on stdout); unknown flags,
// commands and arguments are errors.
func TestHelpAndUsageErrors(t *testing.T) {
	for _, cmd := range []string{"render", "diff", "versions", "version", "plan", "resume-version"} {
		code, out, errOut := swa(t, cmd, "--help")
		if code != 0 || !strings.Contains(out, "Usage:\n  kubectl swa "+cmd) || !strings.Contains(out, "Examples:\n  # ") ||
			!strings.Contains(out, "--kubeconfig string") || errOut != "" {
			t.Errorf("%s --help: exit %d, stderr %q:\n%s", cmd, code, errOut, out)
		}
	}
	if code, out, _ := swa(t, "--help"); code != 0 || !strings.Contains(out, "Available Commands:") {
		t.Errorf("--help: exit %d:\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"render", "--bogus"}, "unknown flag: --bogus\nSee 'kubectl swa render --help' for usage"},
		{[]string{"render", "extra"}, `unknown command "extra" for "kubectl swa render"`},
		{[]string{"bogus"}, `unknown command "bogus" for "kubectl swa"`},
		{[]string{"render", "-f", "x.yaml", "--version", "1.0.0", "--channel", "stable"}, "[channel version] were all set"},
		{[]string{"render", "-f", "x.yaml", "-o", "wide"}, `unable to match a printer suitable for the output format "wide"`},
		{[]string{"version", "--client", "-o", "wide"}, "--output must be 'yaml' or 'json'"},
	} {
		code, out, errOut := swa(t, c.args...)
		if code == 0 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want an error with %q", c.args, code, out, errOut, c.want)
		}
	}
}

// The plugin is built on cobra and cli-runtime.
func TestBuiltOnCobraAndCliRuntime(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "./cmd/kubectl-swa")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, want := range []string{"github.com/spf13/cobra", "k8s.io/cli-runtime/pkg/resource", "k8s.io/cli-runtime/pkg/genericclioptions", "k8s.io/cli-runtime/pkg/printers"} {
		if !strings.Contains(" "+strings.Join(deps, " ")+" ", " "+want+" ") {
			t.Errorf("go list -deps ./cmd/kubectl-swa lacks %s", want)
		}
	}
}

// version prints the plugin's version and the operator's, read from its
// Deployment or, without one, from the SimpleWebApps it applied; --client
// needs no cluster.
func TestVersion(t *testing.T) {
	code, out, errOut := swa(t, "version", "--client", "--kubeconfig", "/nonexistent")
	if code != 0 || out != "Client Version: "+version.Operator+" (revision "+testRevision+", "+goVersion(t)+")\n" {
		t.Errorf("--client: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	var info struct {
		ClientVersion    struct{ Version string }
		OperatorVersions []struct{ Version, Source string }
		Match            *bool
	}
	code, out, _ = swa(t, "version", "--client", "-o", "json")
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || info.ClientVersion.Version != version.Operator || info.Match != nil {
		t.Errorf("--client -o json: exit %d, %v:\n%s", code, err, out)
	}

	// No operator Deployment here (the operator runs in the test): the
	// version the operator stamps on the SimpleWebApps it applies.
	ns := testkit.Namespace(t, env.Client, testkit.NS{Prefix: "plugin-", Keep: true})
	if code, _, errOut := swaCluster(t, "version", "-n", ns); code != 2 || !strings.Contains(errOut, "the operator's version is unknown") {
		t.Errorf("nothing to read: exit %d, stderr %q; want 2", code, errOut)
	}
	deployed(t, writeCR(t, ns, "web", "replicas: 1"))
	code, out, errOut = swaCluster(t, "version", "-n", ns)
	if code != 0 || !strings.Contains(out, "Operator Version: "+version.Operator+" (the applyset.kubernetes.io/tooling annotation of SimpleWebApps in namespace "+ns+")\n") || errOut != "" {
		t.Errorf("exit %d, stderr %q:\n%s", code, errOut, out)
	}

	// A Deployment as config/manager labels it, running another version.
	opNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "swa-version-test"}}
	if err := env.Client.Create(t.Context(), opNS); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "simplewebapp-operator", "control-plane": "controller-manager"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: opNS.Name, Name: "simplewebapp-controller-manager", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "manager", Image: "registry.example/simplewebapp-operator:9.9.9"}}}},
		},
	}
	if err := env.Client.Create(t.Context(), dep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), dep) })
	code, out, errOut = swaCluster(t, "version", "-n", ns)
	if code != 0 || !strings.Contains(out, "Operator Version: 9.9.9 (Deployment swa-version-test/simplewebapp-controller-manager, image registry.example/simplewebapp-operator:9.9.9)\n") ||
		!strings.Contains(errOut, "WARNING: the plugin is version "+version.Operator+" and the operator is not") {
		t.Errorf("exit %d, stderr %q:\n%s", code, errOut, out)
	}
	code, out, _ = swaCluster(t, "version", "-o", "json")
	info.Match = nil
	if err := json.Unmarshal([]byte(out), &info); code != 0 || err != nil || len(info.OperatorVersions) != 1 || info.OperatorVersions[0].Version != "9.9.9" || info.Match == nil || *info.Match {
		t.Errorf("-o json: exit %d, %v; want operator 9.9.9 and match false:\n%s", code, err, out)
	}
}

func goVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
