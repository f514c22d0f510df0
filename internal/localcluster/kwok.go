package localcluster

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KwokNodeAnnotation marks the nodes that kwok manages.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

//go:embed kwok-stages.yaml
var kwokStages string

// NeverReadyStage is a kwok Stage (kwok-stage-never-ready.yaml) for
// Options.ExtraKwokStages: a pod labelled NeverReadyLabel=true runs but never
// becomes Ready, as the pods of a broken version would.
//
//go:embed kwok-stage-never-ready.yaml
var NeverReadyStage string

// NeverReadyLabel is the pod label that NeverReadyStage acts on (value "true").
const NeverReadyLabel = "test.simplewebapp.example.com/never-ready"

// kwokMetrics are the kwok Metric and ClusterResourceUsage objects.
//
//go:embed kwok-metrics.yaml
var kwokMetrics string

// startKwok writes kwok's stages and starts it, serving on port, to play the
// kubelet of every node annotated KwokNodeAnnotation=fake. With metrics it
// also emulates the kubelets' resource metrics (Options.Metrics).
func (c *Cluster) startKwok(opts Options, pki *pki, metrics bool, port int) error {
	stagesFile, err := c.writeKwokStages(opts.ExtraKwokStages, metrics)
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + filepath.Join(c.Dir, Kwok+".kubeconfig"),
		"--config=" + stagesFile,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--node-ip=127.0.0.1",
		"--cidr=10.244.0.1/16", // pod IPs: data only, nothing is routed
		"--server-address=127.0.0.1:" + strconv.Itoa(port),
		// Node heartbeats are Leases (the heartbeat-with-lease stage only
		// refreshes status every ~10 min). kwok creates and renews no Lease
		// unless this is set, and then the node lifecycle controller marks every
		// node NotReady once its grace period has passed, and every pod
		// Ready=False.
		"--node-lease-duration-seconds=40",
	}
	if metrics {
		args = append(args, kwokMetricsArgs(pki)...)
		if opts.Profile == ProfileNode {
			// metrics-server then takes each node's port from its status
			// (the real kubelet's differs): kwok's nodes report kwok's.
			args = append(args, "--node-port="+strconv.Itoa(port))
		}
	}
	return c.startComponent(Kwok, args...)
}

// writeKwokStages writes Dir/kwok-stages.yaml: the standard stages, the extra
// ones and, with metrics, kwokMetrics. It returns the file's path.
func (c *Cluster) writeKwokStages(extra []string, metrics bool) (string, error) {
	stages := kwokStages
	for _, s := range extra {
		stages += "\n---\n" + s
	}
	if metrics {
		stages += "\n---\n" + kwokMetrics
	}
	stagesFile := filepath.Join(c.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesFile, []byte(stages), 0o644); err != nil {
		return "", err
	}
	return stagesFile, nil
}

// kwokMetricsArgs make kwok serve HTTPS (what metrics-server scrapes; kwok
// still answers plain HTTP on the same port) with the certificate of the
// other local servers, valid for 127.0.0.1, the nodes' InternalIP.
func kwokMetricsArgs(p *pki) []string {
	return []string{"--tls-cert-file=" + p.serving.certFile, "--tls-private-key-file=" + p.serving.keyFile}
}

// createFakeNodes creates n nodes kwok-node-<i> for kwok to manage, each with
// room for podsPerNode pods; with metrics each tells metrics-server where kwok
// serves its resource metrics.
func createFakeNodes(ctx context.Context, client kubernetes.Interface, n, podsPerNode int, metrics bool) error {
	for i := range n {
		node := fakeNode(fmt.Sprintf("kwok-node-%d", i), podsPerNode)
		if metrics {
			node.Annotations[ResourceMetricsPathAnnotation] = resourceMetricsPath(node.Name)
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node: %w", err)
		}
	}
	return nil
}

// fakeNode is a Node for kwok to manage, with the capacity the scheduler sees.
func fakeNode(name string, pods int) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
			Labels: map[string]string{
				"type":                   "kwok",
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
			},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
}

// resourceMetricsPath is where kwok serves a node's kubelet resource metrics
// (kwok-metrics.yaml).
func resourceMetricsPath(node string) string { return "/metrics/nodes/" + node + "/metrics/resource" }

// waitNodesReady waits until kwok reports at least want fake nodes Ready.
func (c *Cluster) waitNodesReady(ctx context.Context, client kubernetes.Interface, want int) error {
	return c.waitComponent(ctx, Kwok, fmt.Sprintf("%d kwok nodes Ready", want), 60*time.Second, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, nil //nolint:nilerr // transient: keep polling
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= want, nil
	})
}
