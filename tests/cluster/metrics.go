package cluster

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// MetricsServer is the component (and binary) that serves the resource
// metrics API (metrics.k8s.io) with Options.Metrics.
const MetricsServer = "metrics-server"

// Annotations of Options.Metrics.
const (
	// UsageCPUAnnotation on a pod sets the CPU each of its containers uses,
	// as a quantity ("50m"); kwok reports it as the kubelet would. Without it
	// a container uses 1m.
	UsageCPUAnnotation = "kwok.x-k8s.io/usage-cpu"
	// ResourceMetricsPathAnnotation on a node tells metrics-server where the
	// node's kubelet resource metrics are (kwok serves every node's).
	ResourceMetricsPathAnnotation = "metrics.k8s.io/resource-metrics-path"
)

// MetricResolution is how often metrics-server scrapes kwok: its minimum.
const MetricResolution = 10 * time.Second

// kwokMetrics are the kwok Metric and ClusterResourceUsage objects.
//
//go:embed kwok-metrics.yaml
var kwokMetrics string

// The kube-apiserver proxies metrics.k8s.io to metrics-server (API
// aggregation): it authenticates itself with the front-proxy client
// certificate, and metrics-server takes the user from its request headers.
const frontProxyClientName = "front-proxy-client"

// metricsPKI are the credentials that only Options.Metrics needs.
type metricsPKI struct {
	frontProxyCA     *keyPair // signs frontProxyClient; metrics-server trusts it for request headers
	frontProxyClient *keyPair // the kube-apiserver's client certificate towards metrics-server
	serving          *keyPair // metrics-server's serving certificate
	client           *keyPair // metrics-server's identity towards the kube-apiserver
}

func newMetricsPKI(dir string, ca *keyPair) (*metricsPKI, error) {
	m := &metricsPKI{}
	var err error
	// A CA of its own, as kubeadm does: a client certificate of the cluster CA
	// must not be able to pass as the front proxy.
	if m.frontProxyCA, err = newCert(dir, "front-proxy-ca", nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "simplewebapp-local-front-proxy-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}); err != nil {
		return nil, err
	}
	if m.frontProxyClient, err = newCert(dir, "front-proxy-client", m.frontProxyCA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: frontProxyClientName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	// The aggregator verifies the service's DNS name
	// (<service>.<namespace>.svc) against the APIService's caBundle.
	if m.serving, err = newCert(dir, "metrics-server", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: MetricsServer},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", MetricsServer + ".kube-system.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}); err != nil {
		return nil, err
	}
	// system:masters, like kwok: it reads nodes and pods, reviews tokens and
	// access, and reads the front-proxy CA from kube-system.
	if m.client, err = newCert(dir, "metrics-server-client", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: MetricsServer, Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// apiserverArgs turn on API aggregation in the kube-apiserver.
func (m *metricsPKI) apiserverArgs() []string {
	return []string{
		"--requestheader-client-ca-file=" + m.frontProxyCA.certFile,
		"--requestheader-allowed-names=" + frontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + m.frontProxyClient.certFile,
		"--proxy-client-key-file=" + m.frontProxyClient.keyFile,
	}
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

// kwokMetricsArgs make kwok serve HTTPS (what metrics-server scrapes; kwok
// still answers plain HTTP on the same port) with the certificate of the
// other local servers, valid for 127.0.0.1, the nodes' InternalIP.
func kwokMetricsArgs(p *pki) []string {
	return []string{"--tls-cert-file=" + p.serving.certFile, "--tls-private-key-file=" + p.serving.keyFile}
}

// resourceMetricsPath is where kwok serves a node's kubelet resource metrics
// (kwok-metrics.yaml).
func resourceMetricsPath(node string) string { return "/metrics/nodes/" + node + "/metrics/resource" }

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// startMetricsServer starts metrics-server, registers it as the
// metrics.k8s.io/v1beta1 API, and waits until the kube-apiserver serves that
// API.
func (c *Cluster) startMetricsServer(ctx context.Context, opts Options, p *pki, m *metricsPKI, client kubernetes.Interface,
	start func(string, ...string) error, kwokPort int) error {
	if _, err := os.Stat(filepath.Join(opts.BinDir, MetricsServer)); err != nil {
		return fmt.Errorf("Options.Metrics needs %s in %s, built by tests/tools/build-metrics-server.sh (make tools): %w",
			MetricsServer, opts.BinDir, err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	port := ports[0]
	kubeconfig := filepath.Join(c.Dir, MetricsServer+".kubeconfig")
	if err := writeKubeconfig(kubeconfig, c.restCfg.Host, p.ca, m.client); err != nil {
		return err
	}
	if err := start(MetricsServer,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+m.serving.certFile, "--tls-private-key-file="+m.serving.keyFile,
		// kwok is every node's kubelet: nodes have InternalIP 127.0.0.1 and
		// the metrics path annotation; its certificate is the cluster CA's.
		"--kubelet-port="+strconv.Itoa(kwokPort),
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority="+p.ca.certFile,
		"--metric-resolution="+MetricResolution.String(),
		"--kubelet-request-timeout=5s",
	); err != nil {
		return err
	}

	// The aggregator reaches a Service of type ExternalName at its name and
	// the APIService's port: 127.0.0.1, where metrics-server listens. (An
	// Endpoints object may not hold a loopback address.)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: MetricsServer, Namespace: "kube-system"},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "127.0.0.1",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
		},
	}
	if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service %s: %w", svc.Name, err)
	}
	dyn, err := dynamic.NewForConfig(c.restCfg)
	if err != nil {
		return err
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": "v1beta1.metrics.k8s.io"},
		"spec": map[string]any{
			"group":                "metrics.k8s.io",
			"version":              "v1beta1",
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"caBundle":             p.ca.certPEM, // []byte: base64 in JSON, as the field wants
			"service":              map[string]any{"namespace": "kube-system", "name": MetricsServer, "port": int64(port)},
		},
	}}
	// Through JSON: unstructured content holds only JSON types.
	raw, err := json.Marshal(apiService.Object)
	if err != nil {
		return err
	}
	if err := apiService.UnmarshalJSON(raw); err != nil {
		return err
	}
	if _, err := dyn.Resource(apiServiceGVR).Create(ctx, apiService, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create APIService v1beta1.metrics.k8s.io: %w", err)
	}

	if err := c.waitComponent(ctx, MetricsServer, "APIService v1beta1.metrics.k8s.io Available", 90*time.Second, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(apiServiceGVR).Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient: keep polling
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Available" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	// Served through the aggregator. (Lists stay empty until pods run: kwok
	// reports no node without pods, and CPU use needs two scrapes.)
	return c.waitComponent(ctx, MetricsServer, "metrics.k8s.io served", 60*time.Second, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/nodes").DoRaw(ctx)
		return err == nil, nil
	})
}
