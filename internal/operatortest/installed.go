package operatortest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/internal/localcluster"
)

// StartInstalled runs the operator as the installed Deployment ns/name
// would run it in a pod, which kwok's fake nodes cannot: the binary built
// from this module, with a TokenRequest token of the Deployment's
// ServiceAccount as its only credential (so exactly the rights the install
// granted) and the Deployment's container args. Only what a pod provides
// differs: the probe and metrics endpoints listen on free loopback ports, and
// the leader election Lease is in ns (in a pod, its own namespace). The
// caller stops it (Kill or Stop).
func (e *Env) StartInstalled(ctx context.Context, ns, name string) (*Operator, error) {
	dep, err := e.CS.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) == 0 {
		return nil, fmt.Errorf("deployment %s/%s has no container", ns, name)
	}
	sa := pod.ServiceAccountName
	tok, err := e.CS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenRequest for %s/%s: %w", ns, sa, err)
	}
	kubeconfig, err := e.TokenKubeconfig("installed-"+ns+"-"+sa, tok.Status.Token)
	if err != nil {
		return nil, err
	}
	var args []string
	leaseNS := false
	for _, a := range pod.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--health-probe-bind-address"): // Start sets a free one
			continue
		case strings.HasPrefix(a, "--metrics-bind-address=") && a != "--metrics-bind-address=0":
			ports, err := localcluster.FreePorts(1)
			if err != nil {
				return nil, err
			}
			a = fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0])
		case strings.HasPrefix(a, "--leader-election-namespace"):
			leaseNS = true
		}
		args = append(args, a)
	}
	if !leaseNS {
		args = append(args, "--leader-election-namespace="+ns)
	}
	bin, err := e.OperatorBin()
	if err != nil {
		return nil, err
	}
	return Start(Config{
		Name:         ns + "/" + name,
		Bin:          bin,
		Kubeconfig:   kubeconfig,
		Args:         args,
		LogPath:      filepath.Join(e.Dir, ns+"-"+name+".log"),
		OutOfCluster: true,
	})
}
