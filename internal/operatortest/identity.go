package operatortest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The operator's namespace and ServiceAccount, as config/default deploys it.
// config/rbac/leader_election_role_binding.yaml names the ServiceAccount.
const (
	Namespace      = "simplewebapp-system"
	ServiceAccount = "controller-manager"
)

// Identity is a ServiceAccount and a kubeconfig that holds only a token of
// it.
type Identity struct {
	Namespace, ServiceAccount string
	Token                     string // a TokenRequest token, valid for an hour
	Kubeconfig                string // path of a kubeconfig with Token as the only credential
}

// OperatorRBAC says how SetUpOperatorIdentity binds the operator's
// ServiceAccount.
type OperatorRBAC struct {
	// ClusterRoleBinding is the name of the binding to the ClusterRole of
	// config/rbac/role.yaml.
	ClusterRoleBinding string
	// LeaderElection also creates the Role of
	// config/rbac/leader_election_role.yaml and its binding
	// (leader_election_role_binding.yaml), moved from the kustomize
	// placeholder namespace "system" to Namespace, as config/default does.
	LeaderElection bool
}

// SetUpOperatorIdentity creates Namespace and the operator's ServiceAccount
// in it, binds that to the generated ClusterRole (created from
// config/rbac/role.yaml as it is, not rewritten here) and, as rbac says, to
// the leader election Role. It returns the ServiceAccount's identity. The
// authorizer sees the bindings a moment later: wait with Kubectl.WaitCanI.
func (e *Env) SetUpOperatorIdentity(ctx context.Context, rbac OperatorRBAC) (*Identity, error) {
	if _, err := e.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	id, err := e.NewServiceAccount(ctx, Namespace, ServiceAccount)
	if err != nil {
		return nil, err
	}
	var clusterRole rbacv1.ClusterRole
	if err := readYAML(filepath.Join(e.Root, "config/rbac/role.yaml"), &clusterRole); err != nil {
		return nil, err
	}
	if _, err := e.CS.RbacV1().ClusterRoles().Create(ctx, &clusterRole, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := e.BindClusterRole(ctx, rbac.ClusterRoleBinding, clusterRole.Name, id); err != nil {
		return nil, err
	}
	if !rbac.LeaderElection {
		return id, nil
	}

	var role rbacv1.Role
	if err := readYAML(filepath.Join(e.Root, "config/rbac/leader_election_role.yaml"), &role); err != nil {
		return nil, err
	}
	role.Namespace = Namespace
	if _, err := e.CS.RbacV1().Roles(Namespace).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var binding rbacv1.RoleBinding
	if err := readYAML(filepath.Join(e.Root, "config/rbac/leader_election_role_binding.yaml"), &binding); err != nil {
		return nil, err
	}
	binding.Namespace = Namespace
	for i := range binding.Subjects {
		binding.Subjects[i].Namespace = Namespace
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != ServiceAccount {
		return nil, fmt.Errorf("config/rbac/leader_election_role_binding.yaml does not bind %s to ServiceAccount %s: %+v", role.Name, ServiceAccount, binding)
	}
	if _, err := e.CS.RbacV1().RoleBindings(Namespace).Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return id, nil
}

// BindClusterRole creates the ClusterRoleBinding name of the ClusterRole role
// to id's ServiceAccount.
func (e *Env) BindClusterRole(ctx context.Context, name, role string, id *Identity) error {
	_, err := e.CS.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: id.ServiceAccount, Namespace: id.Namespace}},
	}, metav1.CreateOptions{})
	return err
}

// NewServiceAccount creates the ServiceAccount ns/name (ns must exist), bound
// to nothing, and returns its identity: a TokenRequest token and a kubeconfig,
// Dir/<name>.kubeconfig, holding only that token.
func (e *Env) NewServiceAccount(ctx context.Context, ns, name string) (*Identity, error) {
	if _, err := e.CS.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	tok, err := e.CS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenRequest for %s/%s: %w", ns, name, err)
	}
	id := &Identity{Namespace: ns, ServiceAccount: name, Token: tok.Status.Token}
	if id.Kubeconfig, err = e.TokenKubeconfig(name, id.Token); err != nil {
		return nil, err
	}
	return id, nil
}

// TokenKubeconfig writes Dir/<name>.kubeconfig: the cluster's server and CA,
// and token as the only credential. It returns the path.
func (e *Env) TokenKubeconfig(name, token string) (string, error) {
	admin := e.Cluster.Kubeconfig
	adminCfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		return "", err
	}
	cur, ok := adminCfg.Contexts[adminCfg.CurrentContext]
	if !ok || adminCfg.Clusters[cur.Cluster] == nil || len(adminCfg.Clusters[cur.Cluster].CertificateAuthorityData) == 0 {
		return "", fmt.Errorf("%s: no current cluster with an embedded CA", admin)
	}
	server := adminCfg.Clusters[cur.Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server.Server, CertificateAuthorityData: server.CertificateAuthorityData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = name
	path := filepath.Join(e.Dir, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// readYAML reads one object from a YAML file, rejecting unknown fields.
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

// ImpersonatingOperator binds the generated ClusterRole (config/rbac/role.yaml
// under root) to the operator's ServiceAccount and returns cfg impersonating
// it, for envtest packages (no token issuer): a verb the RBAC markers miss
// fails there as in a real install.
func ImpersonatingOperator(ctx context.Context, c client.Client, cfg *rest.Config, root string) (*rest.Config, error) {
	raw, err := os.ReadFile(filepath.Join(root, "config/rbac/role.yaml"))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(raw, role); err != nil {
		return nil, err
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ServiceAccount}},
		role,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "simplewebapp-manager"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: ServiceAccount}},
		},
	} {
		if err := c.Create(ctx, obj); err != nil {
			return nil, err
		}
	}
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + Namespace + ":" + ServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"}}
	return out, nil
}

// StartOperator runs the operator the way tests/e2e does: it sets up the
// operator's identity with rbac, waits until the authorizer lets it watch
// SimpleWebApps, starts the binary with a token of it and args (logging to
// Dir/operator.log), and waits until it is ready. cleanup kills it.
func (e *Env) StartOperator(ctx context.Context, rbac OperatorRBAC, args []string, cleanup func(func())) (*Operator, error) {
	t0 := time.Now()
	id, err := e.SetUpOperatorIdentity(ctx, rbac)
	if err != nil {
		return nil, err
	}
	if err := e.Kubectl.WaitCanI(ctx, 30*time.Second, CanIWant{
		Kubeconfig: id.Kubeconfig, Args: []string{"watch", "simplewebapps.example.com", "--all-namespaces"}, Want: "yes",
	}); err != nil {
		return nil, err
	}
	e.Step(t0, "ServiceAccount %s/%s bound to the ClusterRole of config/rbac/role.yaml", Namespace, ServiceAccount)
	bin, err := e.OperatorBin()
	if err != nil {
		return nil, err
	}
	t0 = time.Now()
	op, err := Start(Config{Name: e.Name, Bin: bin, Kubeconfig: id.Kubeconfig, LogPath: filepath.Join(e.Dir, "operator.log"), Args: args})
	if err != nil {
		return nil, err
	}
	cleanup(op.Kill)
	if err := op.WaitReady(ctx, 60*time.Second); err != nil {
		return op, err
	}
	e.Step(t0, "operator ready (log: %s)", op.LogPath())
	return op, nil
}
