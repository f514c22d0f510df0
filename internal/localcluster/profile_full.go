package localcluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// startFull starts the controllers and kwok, creates the fake nodes and waits
// until the cluster can run pods.
func (c *Cluster) startFull(ctx context.Context, opts Options, pki *pki, mpki *metricsPKI, client kubernetes.Interface,
	https *http.Client, ports ports) error {
	if err := c.startControllerManager(opts, pki, ports.controllerManager); err != nil {
		return err
	}
	if err := c.startScheduler(pki, ports.scheduler); err != nil {
		return err
	}
	// Profile node may have no kwok nodes: then no kwok either.
	if opts.Nodes > 0 {
		if err := c.startKwok(opts, pki, mpki != nil, ports.kwok); err != nil {
			return err
		}
		if err := createFakeNodes(ctx, client, opts.Nodes, opts.PodsPerNode, mpki != nil); err != nil {
			return err
		}
	}
	if err := c.waitControllersHealthy(ctx, https, ports); err != nil {
		return err
	}
	if opts.Nodes > 0 {
		if err := c.waitNodesReady(ctx, client, opts.Nodes); err != nil {
			return err
		}
	}
	if err := c.waitDefaultServiceAccount(ctx, client); err != nil {
		return err
	}
	if mpki != nil {
		return c.startMetricsServer(ctx, opts, pki, mpki, client, ports.kwok, opts.Profile == ProfileNode)
	}
	return nil
}

// startControllerManager starts kube-controller-manager, serving /healthz on
// port.
func (c *Cluster) startControllerManager(opts Options, pki *pki, port int) error {
	kubeconfig := filepath.Join(c.Dir, ControllerManager+".kubeconfig")
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + pki.serving.certFile, "--tls-private-key-file=" + pki.serving.keyFile,
		"--service-account-private-key-file=" + pki.saKeyFile,
		"--root-ca-file=" + pki.ca.certFile,
		"--cluster-signing-cert-file=" + pki.ca.certFile, "--cluster-signing-key-file=" + pki.ca.keyFile,
		"--use-service-account-credentials",
		"--leader-elect=false",
		// No pod CIDRs are allocated: kwok assigns pod IPs itself, and the
		// real node's CNI has its range configured.
		"--controllers=*,-nodeipam",
	}
	return c.startComponent(ControllerManager, append(args, hpaArgs(opts)...)...)
}

// hpaArgs are the kube-controller-manager's HPA settings from opts; zero
// values keep its defaults.
func hpaArgs(opts Options) []string {
	var args []string
	if opts.HPASyncPeriod > 0 {
		args = append(args, "--horizontal-pod-autoscaler-sync-period="+opts.HPASyncPeriod.String())
	}
	if opts.HPADownscaleStabilization > 0 {
		args = append(args, "--horizontal-pod-autoscaler-downscale-stabilization="+opts.HPADownscaleStabilization.String())
	}
	return args
}

// startScheduler starts kube-scheduler, serving /healthz on port.
func (c *Cluster) startScheduler(pki *pki, port int) error {
	kubeconfig := filepath.Join(c.Dir, Scheduler+".kubeconfig")
	return c.startComponent(Scheduler,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+pki.serving.certFile, "--tls-private-key-file="+pki.serving.keyFile,
		"--leader-elect=false",
	)
}

// waitControllersHealthy waits for the /healthz of kube-controller-manager,
// then kube-scheduler, and makes it their readiness check for Restart.
func (c *Cluster) waitControllersHealthy(ctx context.Context, https *http.Client, ports ports) error {
	for _, h := range []struct {
		name string
		port int
	}{{ControllerManager, ports.controllerManager}, {Scheduler, ports.scheduler}} {
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", h.port)
		c.ready[h.name] = func(ctx context.Context) bool { return httpOK(ctx, https, url) }
		if err := c.waitComponent(ctx, h.name, h.name+" /healthz", 60*time.Second, func(ctx context.Context) (bool, error) {
			return httpOK(ctx, https, url), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// waitDefaultServiceAccount waits for the ServiceAccount default/default,
// which the controller-manager creates: pods can only be created in a
// namespace once it exists (ServiceAccount admission).
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context, client kubernetes.Interface) error {
	return c.waitComponent(ctx, ControllerManager, "ServiceAccount default/default", 60*time.Second, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}
