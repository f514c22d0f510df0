package operatortest

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The roles of config/rbac that SetUpOperatorIdentity creates.
const (
	ManagerRole        = "manager-role"         // config/rbac/role.yaml
	LeaderElectionRole = "leader-election-role" // config/rbac/leader_election_role.yaml
)

// NewReplicaIdentity gives one operator replica an identity of its own: a
// ServiceAccount name in Namespace bound to the same roles as the
// operator's (ManagerRole, and LeaderElectionRole in Namespace). Two replicas
// with their own identities are told apart in the audit log (user name),
// which a shared ServiceAccount and the binary's user agent cannot do. It
// must run after SetUpOperatorIdentity with LeaderElection (which creates
// the roles); the authorizer sees the bindings a moment later
// (Kubectl.WaitCanI).
func (e *Env) NewReplicaIdentity(ctx context.Context, name string) (*Identity, error) {
	id, err := e.NewServiceAccount(ctx, Namespace, name)
	if err != nil {
		return nil, err
	}
	if err := e.BindClusterRole(ctx, name+"-manager", ManagerRole, id); err != nil {
		return nil, err
	}
	_, err = e.CS.RbacV1().RoleBindings(Namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-leader-election", Namespace: Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: LeaderElectionRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: Namespace}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("binding %s to %s: %w", name, LeaderElectionRole, err)
	}
	return id, nil
}

// User is the identity's user name as the API server (and its audit log)
// sees it.
func (id *Identity) User() string {
	return "system:serviceaccount:" + id.Namespace + ":" + id.ServiceAccount
}
