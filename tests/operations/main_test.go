// Package operations tests how the operator is run in production: leader
// election between replicas (and how long a takeover takes), the secure
// metrics endpoint, structured logs, and that the dashboards and alerts in
// config/prometheus match the metrics the operator really serves.
//
// Like tests/e2e, the operator binary runs as its own process, authenticated
// with a TokenRequest token of its own ServiceAccount that is bound only to
// config/rbac (role.yaml cluster-wide, leader_election_role.yaml in the
// operator namespace). The tests share one full local cluster and run one
// after another: every operator started here watches all namespaces, so two
// tests' operators running at once would reconcile each other's resources.
package operations

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/tests/cluster"
)

const (
	operatorNamespace = "simplewebapp-system"
	operatorSA        = "controller-manager"
	managerRole       = "manager-role"   // config/rbac/role.yaml
	metricsReaderRole = "metrics-reader" // config/rbac/metrics_reader_role.yaml
	// leaseName is the LeaderElectionID set in main.go.
	leaseName = "simplewebapp-operator.example.com"

	scraperSA  = "metrics-scraper" // bound to metricsReaderRole
	noRightsSA = "no-metrics"      // bound to nothing
)

// env is the shared cluster and identities, set up by TestMain.
var env *testEnv

type testEnv struct {
	root         string // repository root
	tmp          string
	bin          string // the operator binary
	cluster      *cluster.Cluster
	kubectlBin   string // the cluster's kubectl, never the one on PATH
	kubectlCache string
	cs           kubernetes.Interface
	c            client.Client // admin, uncached

	opKubeconfig  string // a token of the operator's ServiceAccount, nothing else
	scraperToken  string // may GET /metrics
	noRightsToken string // authenticates, may not GET /metrics

	// metricsCertDir holds tls.crt/tls.key for 127.0.0.1, signed by metricsCA,
	// passed to the operator as --metrics-cert-dir.
	metricsCertDir string
	metricsCA      *x509.CertPool
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	e, err := setUp(func(f func()) { cleanups = append(cleanups, f) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "operations setup failed:", err)
		return 1
	}
	env = e
	return m.Run()
}

func setUp(cleanup func(func())) (*testEnv, error) {
	logw := io.Discard
	if testing.Verbose() {
		logw = os.Stderr
	}
	step := func(start time.Time, format string, args ...any) {
		fmt.Fprintf(logw, "operations setup: %s in %s\n", fmt.Sprintf(format, args...), time.Since(start).Round(time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "swa-operations-")
	if err != nil {
		return nil, err
	}
	cleanup(func() { os.RemoveAll(tmp) })
	e := &testEnv{root: root, tmp: tmp, kubectlCache: filepath.Join(tmp, "kubectl-cache"), bin: filepath.Join(tmp, "simplewebapp-operator")}

	built := make(chan error, 1)
	go func() {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", e.bin, "example.com/simplewebapp-operator")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		step(t0, "operator built")
		built <- err
	}()

	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Profile: cluster.ProfileFull, LogWriter: logw})
	if err != nil {
		<-built
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	cleanup(func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
		}
	})
	step(t0, "full cluster ready")
	e.cluster = c
	binDir, err := cluster.BinDir()
	if err != nil {
		return nil, err
	}
	e.kubectlBin = filepath.Join(binDir, "kubectl")
	if e.cs, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := webappv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if e.c, err = client.New(c.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}

	t0 = time.Now()
	if _, err := e.admin("apply", "--server-side", "-f", filepath.Join(root, "config/crd/bases/")); err != nil {
		return nil, err
	}
	if _, err := e.admin("wait", "--for=condition=Established", "crd/simplewebapps.example.com", "--timeout=60s"); err != nil {
		return nil, err
	}
	step(t0, "CRD installed")

	t0 = time.Now()
	if err := e.identities(ctx); err != nil {
		return nil, err
	}
	step(t0, "ServiceAccounts %s (manager-role, leader-election-role), %s (metrics-reader), %s (nothing)", operatorSA, scraperSA, noRightsSA)

	if err := e.writeMetricsCert(); err != nil {
		return nil, err
	}
	if err := <-built; err != nil {
		return nil, err
	}
	return e, nil
}

// identities creates the operator namespace and three ServiceAccounts in it:
//   - the operator's, bound to the generated ClusterRole (config/rbac/role.yaml)
//     and to the leader election Role (config/rbac/leader_election_role.yaml
//     and its binding, moved from the kustomize placeholder namespace "system"
//     to the operator namespace, as config/default does);
//   - a scraper bound to config/rbac/metrics_reader_role.yaml;
//   - one bound to nothing.
//
// It writes the operator's kubeconfig and keeps tokens of the other two, and
// returns once the API server's authorizer sees every binding.
func (e *testEnv) identities(ctx context.Context) error {
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, sa := range []string{operatorSA, scraperSA, noRightsSA} {
		if _, err := e.cs.CoreV1().ServiceAccounts(operatorNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, f := range []string{"config/rbac/role.yaml", "config/rbac/metrics_reader_role.yaml"} {
		if _, err := e.admin("apply", "--server-side", "-f", filepath.Join(e.root, f)); err != nil {
			return err
		}
	}
	bind := func(name, role, sa string) error {
		_, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: operatorNamespace}},
		}, metav1.CreateOptions{})
		return err
	}
	if err := bind("operations-manager-rolebinding", managerRole, operatorSA); err != nil {
		return err
	}
	if err := bind("operations-metrics-reader", metricsReaderRole, scraperSA); err != nil {
		return err
	}

	var role rbacv1.Role
	if err := readYAML(filepath.Join(e.root, "config/rbac/leader_election_role.yaml"), &role); err != nil {
		return err
	}
	role.Namespace = operatorNamespace
	if _, err := e.cs.RbacV1().Roles(operatorNamespace).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		return err
	}
	var binding rbacv1.RoleBinding
	if err := readYAML(filepath.Join(e.root, "config/rbac/leader_election_role_binding.yaml"), &binding); err != nil {
		return err
	}
	binding.Namespace = operatorNamespace
	for i := range binding.Subjects {
		binding.Subjects[i].Namespace = operatorNamespace
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != operatorSA {
		return fmt.Errorf("config/rbac/leader_election_role_binding.yaml does not bind %s to ServiceAccount %s: %+v", role.Name, operatorSA, binding)
	}
	if _, err := e.cs.RbacV1().RoleBindings(operatorNamespace).Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		return err
	}

	token := func(sa string) (string, error) {
		tok, err := e.cs.CoreV1().ServiceAccounts(operatorNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("TokenRequest for %s/%s: %w", operatorNamespace, sa, err)
		}
		return tok.Status.Token, nil
	}
	opToken, err := token(operatorSA)
	if err != nil {
		return err
	}
	if e.scraperToken, err = token(scraperSA); err != nil {
		return err
	}
	if e.noRightsToken, err = token(noRightsSA); err != nil {
		return err
	}
	if e.opKubeconfig, err = e.tokenKubeconfig("operator", opToken); err != nil {
		return err
	}
	scraperKubeconfig, err := e.tokenKubeconfig(scraperSA, e.scraperToken)
	if err != nil {
		return err
	}
	noRightsKubeconfig, err := e.tokenKubeconfig(noRightsSA, e.noRightsToken)
	if err != nil {
		return err
	}

	// The RBAC authorizer sees new bindings through an informer.
	for _, check := range []struct {
		kubeconfig string
		args       []string
		want       string
	}{
		{e.opKubeconfig, []string{"watch", "simplewebapps.example.com", "--all-namespaces"}, "yes"},
		{e.opKubeconfig, []string{"update", "leases.coordination.k8s.io", "-n", operatorNamespace}, "yes"},
		{e.opKubeconfig, []string{"create", "subjectaccessreviews.authorization.k8s.io"}, "yes"},
		{e.opKubeconfig, []string{"create", "leases.coordination.k8s.io", "-n", "default"}, "no"},
		{scraperKubeconfig, []string{"get", "/metrics"}, "yes"},
		{noRightsKubeconfig, []string{"get", "/metrics"}, "no"},
	} {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			last, _ = e.canI(check.kubeconfig, check.args...)
			return last == check.want, nil
		})
		if err != nil {
			return fmt.Errorf("kubectl auth can-i %s as %s: %q, want %q: %w", strings.Join(check.args, " "), check.kubeconfig, last, check.want, err)
		}
	}
	return nil
}

// tokenKubeconfig writes a kubeconfig for the cluster holding only token.
func (e *testEnv) tokenKubeconfig(name, token string) (string, error) {
	adminCfg, err := clientcmd.LoadFromFile(e.cluster.Kubeconfig)
	if err != nil {
		return "", err
	}
	cur, ok := adminCfg.Contexts[adminCfg.CurrentContext]
	if !ok || adminCfg.Clusters[cur.Cluster] == nil || len(adminCfg.Clusters[cur.Cluster].CertificateAuthorityData) == 0 {
		return "", fmt.Errorf("%s: no current cluster with an embedded CA", e.cluster.Kubeconfig)
	}
	server := adminCfg.Clusters[cur.Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server.Server, CertificateAuthorityData: server.CertificateAuthorityData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = name
	path := filepath.Join(e.tmp, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// writeMetricsCert makes a CA and a serving certificate for 127.0.0.1 signed
// by it, in the layout --metrics-cert-dir expects (tls.crt, tls.key). With it
// the scrapes verify the operator's certificate instead of skipping
// verification, as a Prometheus with a cert-manager CA would.
func (e *testEnv) writeMetricsCert() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "operations-test-metrics-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "simplewebapp-operator-metrics"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	e.metricsCertDir = filepath.Join(e.tmp, "metrics-certs")
	if err := os.Mkdir(e.metricsCertDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.metricsCertDir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.metricsCertDir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	e.metricsCA = x509.NewCertPool()
	e.metricsCA.AddCert(caCert)
	return nil
}

func readYAML(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
