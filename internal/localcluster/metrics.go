package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
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

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// metricsAPIService is the APIService that registers metrics-server.
const metricsAPIService = "v1beta1.metrics.k8s.io"

// startMetricsServer starts metrics-server, registers it as the
// metrics.k8s.io/v1beta1 API, and waits until the kube-apiserver serves that
// API.
func (c *Cluster) startMetricsServer(ctx context.Context, opts Options, p *pki, m *metricsPKI,
	client kubernetes.Interface, kwokPort int, realNode bool) error {
	port, err := c.startMetricsServerProcess(opts.BinDir, p, m, kwokPort, realNode)
	if err != nil {
		return err
	}
	if err := createMetricsService(ctx, client, port); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.restCfg)
	if err != nil {
		return err
	}
	if err := registerMetricsAPIService(ctx, dyn, p.ca.certPEM, port); err != nil {
		return err
	}
	if err := c.waitMetricsAPIServiceAvailable(ctx, dyn); err != nil {
		return err
	}
	// Served through the aggregator. (Lists stay empty until pods run: kwok
	// reports no node without pods, and CPU use needs two scrapes.)
	return c.waitComponent(ctx, MetricsServer, "metrics.k8s.io served", 60*time.Second, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/nodes").DoRaw(ctx)
		return err == nil, nil
	})
}

// startMetricsServerProcess starts the metrics-server binary from binDir on a
// free port, scraping kwok at kwokPort, and returns that port. With a real
// node it scrapes each node at the port in its status: the real kubelet's,
// and kwok's (kwok --node-port) for the fake nodes.
func (c *Cluster) startMetricsServerProcess(binDir string, p *pki, m *metricsPKI, kwokPort int, realNode bool) (int, error) {
	if _, err := os.Stat(filepath.Join(binDir, MetricsServer)); err != nil {
		return 0, fmt.Errorf("Options.Metrics needs %s in %s, built by hack/tools/build-metrics-server.sh (make tools): %w",
			MetricsServer, binDir, err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	port := ports[0]
	kubeconfig := filepath.Join(c.Dir, MetricsServer+".kubeconfig")
	if err := writeKubeconfig(kubeconfig, c.restCfg.Host, p.ca, m.client); err != nil {
		return 0, err
	}
	kubeletPort := "--kubelet-port=" + strconv.Itoa(kwokPort)
	if realNode {
		kubeletPort = "--kubelet-use-node-status-port"
	}
	if err := c.startComponent(MetricsServer,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+m.serving.certFile, "--tls-private-key-file="+m.serving.keyFile,
		// kwok is every fake node's kubelet: nodes have InternalIP 127.0.0.1
		// and the metrics path annotation; its certificate is the cluster
		// CA's, as is the real kubelet's (for the node IP).
		kubeletPort,
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority="+p.ca.certFile,
		"--metric-resolution="+MetricResolution.String(),
		"--kubelet-request-timeout=5s",
	); err != nil {
		return 0, err
	}
	return port, nil
}

// createMetricsService creates the Service kube-system/metrics-server through
// which the aggregator reaches metrics-server on port.
func createMetricsService(ctx context.Context, client kubernetes.Interface, port int) error {
	// The aggregator reaches a Service of type ExternalName at its name and
	// the APIService's port: 127.0.0.1, where metrics-server listens. (An
	// Endpoints object may not hold a loopback address.)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: MetricsServer, Namespace: "kube-system"},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "127.0.0.1",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}}, //nolint:gosec // G115: a TCP port (FreePorts)
		},
	}
	if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service %s: %w", svc.Name, err)
	}
	return nil
}

// registerMetricsAPIService creates the APIService that makes the
// kube-apiserver proxy metrics.k8s.io/v1beta1 to metrics-server's Service,
// verifying its certificate with caPEM.
func registerMetricsAPIService(ctx context.Context, dyn dynamic.Interface, caPEM []byte, port int) error {
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": metricsAPIService},
		"spec": map[string]any{
			"group":                "metrics.k8s.io",
			"version":              "v1beta1",
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"caBundle":             caPEM, // []byte: base64 in JSON, as the field wants
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
	return nil
}

// waitMetricsAPIServiceAvailable waits until the aggregator reports the
// metrics APIService Available, i.e. it reaches metrics-server.
func (c *Cluster) waitMetricsAPIServiceAvailable(ctx context.Context, dyn dynamic.Interface) error {
	return c.waitComponent(ctx, MetricsServer, "APIService v1beta1.metrics.k8s.io Available", 90*time.Second, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(apiServiceGVR).Get(ctx, metricsAPIService, metav1.GetOptions{})
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
	})
}
