package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

// startEtcd starts etcd and waits for its /health; it returns the client URL.
// It serves plain HTTP on loopback with fsync off because the data is
// throwaway.
func (c *Cluster) startEtcd(ctx context.Context, ports ports) (string, error) {
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports.etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports.etcdPeer)
	if err := c.startComponent(Etcd,
		"--name=default", "--data-dir="+filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return "", err
	}
	plain := plainHTTPClient()
	c.ready[Etcd] = func(ctx context.Context) bool { return httpOK(ctx, plain, etcdURL+"/health") }
	if err := c.waitComponent(ctx, Etcd, "etcd /health", 30*time.Second, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, plain, etcdURL+"/health"), nil
	}); err != nil {
		return "", err
	}
	return etcdURL, nil
}

// plainHTTPClient is the client of the plain-HTTP health checks.
func plainHTTPClient() *http.Client { return &http.Client{Timeout: 2 * time.Second} }

// startAPIServer starts kube-apiserver at server (listening on port) with
// its data in etcd at etcdURL, and waits for its /readyz. It returns the
// client it checked /readyz with, for the other components' health checks.
func (c *Cluster) startAPIServer(ctx context.Context, opts Options, pki *pki, mpki *metricsPKI,
	etcdURL, server string, port int) (*http.Client, error) {
	args := c.apiServerArgs(opts, pki, etcdURL, port)
	if mpki != nil {
		args = append(args, mpki.apiserverArgs()...)
	}
	if err := c.startComponent(APIServer, args...); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(pki.ca.cert)
	// An anonymous HTTPS client that verifies our CA: /readyz and /healthz are
	// readable without credentials.
	verified := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	if err := c.waitComponent(ctx, APIServer, "kube-apiserver /readyz", 90*time.Second, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, verified, server+"/readyz"), nil
	}); err != nil {
		return nil, err
	}
	c.ready[APIServer] = func(ctx context.Context) bool { return httpOK(ctx, verified, server+"/readyz") }
	return verified, nil
}

// apiServerArgs are kube-apiserver's flags, before those of Options.Metrics
// and componentFlags.
func (c *Cluster) apiServerArgs(opts Options, pki *pki, etcdURL string, port int) []string {
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + c.Dir,
		"--tls-cert-file=" + pki.apiserver.certFile, "--tls-private-key-file=" + pki.apiserver.keyFile,
		"--client-ca-file=" + pki.ca.certFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saPubFile,
		"--service-account-signing-key-file=" + pki.saKeyFile,
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + opts.ServiceCIDR,
		// Without it a privileged pod fails validation before Pod Security
		// admission (on by default) could reject it.
		"--allow-privileged=true",
	}
	if opts.Profile == ProfileNode {
		return append(args,
			// Pods reach it through the "kubernetes" Service (kube-proxy):
			// it listens on the bridge and the lease reconciler (the default)
			// writes that address into the Service's endpoints.
			"--bind-address="+nodeIP, "--advertise-address="+nodeIP,
			// For kubectl logs and exec: the node's Hostname does not resolve.
			"--kubelet-preferred-address-types=InternalIP,Hostname",
		)
	}
	return append(args,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		// v1.37 refuses a loopback advertise address while the endpoint
		// reconciler is on; the "kubernetes" Endpoints are not needed here.
		"--endpoint-reconciler-type=none",
	)
}
