// Package envop starts a real API server (envtest: etcd + kube-apiserver)
// with the CRD installed and the reconciler running in-process under the
// generated ClusterRole, as tests/integration does, for the plugin and Argo
// CD tests. There is no Deployment controller: tests mark roll-outs done.
package envop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/controllers"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/objcache"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/render"
)

// Env is a running API server with the operator.
type Env struct {
	// Client is an admin client, uncached.
	Client client.Client
	// Kubeconfig is an admin kubeconfig file for the API server.
	Kubeconfig string
	stop       func()
}

// Start starts the API server and the operator with channels. Stop it with
// Env.Stop.
func Start(channels render.Channels) (_ *Env, err error) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = webappv1.AddToScheme(scheme)
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	env, err := localcluster.EnvtestEnvironment(filepath.Join(root, "config", "crd", "bases"))
	if err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dir, _ := os.MkdirTemp("", "swa-envop-")
	e := &Env{stop: func() {
		cancel()
		_ = env.Stop()
		_ = os.RemoveAll(dir)
	}}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	e.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cfg, e.Kubeconfig); err != nil {
		return nil, err
	}
	opCfg, err := operatortest.ImpersonatingOperator(ctx, e.Client, cfg, root)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(opCfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, Cache: objcache.CacheOptions()})
	if err != nil {
		return nil, err
	}
	if _, err := controllers.Setup(mgr, controllers.Options{Channels: channels, ChannelsPollInterval: 100 * time.Millisecond}); err != nil {
		return nil, err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
			os.Exit(1)
		}
	}()
	return e, nil
}

// Stop stops the operator and the API server.
func (e *Env) Stop() { e.stop() }

// MarkRolledOut plays the Deployment controller: every desired pod of the
// Deployment's current generation updated and available.
func (e *Env) MarkRolledOut(ctx context.Context, ns, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		n := int32(1)
		if d.Spec.Replicas != nil {
			n = *d.Spec.Replicas
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
		return e.Client.Status().Update(ctx, d)
	})
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}
