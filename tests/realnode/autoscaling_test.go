package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// loadWorkers is how many clients send requests back to back during the
// load phase: enough to keep a 10m-request nginx far over its target.
const loadWorkers = 8

// TestAutoscalesOnRealCPU sends load through the Service: metrics-server
// reads the web server's CPU use from the real kubelet, the HPA scales the
// app out to maxReplicas, and back in to minReplicas once the load stops; the
// Service answers right after the scale-in.
func TestAutoscalesOnRealCPU(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	const name, msg = "busy", "Under load"
	const minReplicas, maxReplicas = 1, 3
	// rapid's version: its pods finish serving before they stop, so the
	// scale-in drops no request either (see TestMessageRolloutDropsNoRequest).
	createApp(t, ns, name, webappv1.SimpleWebAppSpec{
		Replicas: ptr.To[int32](1), Message: msg, Channel: "rapid",
		Autoscaling: &webappv1.Autoscaling{MinReplicas: minReplicas, MaxReplicas: maxReplicas, TargetCPUUtilizationPercentage: 50},
	})
	a := waitSettled(t, ns, name, minReplicas)
	if rapid := testkit.ChannelVersion(t, "rapid"); a.swa.Status.Version != rapid {
		t.Fatalf("status.version %q, want the rapid channel's %s", a.swa.Status.Version, rapid)
	}
	pod := a.pods[0]
	testkit.WaitFor(t, timeout, "metrics-server serving pod "+pod.Name+"'s CPU use, read from the kubelet", func(ctx context.Context) (bool, string) {
		cpu, err := podCPU(ctx, ns, pod.Name)
		return err == nil && cpu != nil, fmt.Sprintf("%v %v", cpu, err)
	}, waitOpts(ns))

	loaded := time.Now()
	stop, served := startLoad(ctx, a.serviceURL())
	var peak string
	testkit.WaitFor(t, timeout, fmt.Sprintf("the HPA scaling to %d pods on the measured CPU", maxReplicas), func(ctx context.Context) (bool, string) {
		d, h, err := scaleState(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		if cpu, err := podCPU(ctx, ns, pod.Name); err == nil && cpu != nil {
			peak = cpu.String()
		}
		return *d.Spec.Replicas == maxReplicas, fmt.Sprintf("Deployment replicas %d; HPA %s; pod %s CPU %s", *d.Spec.Replicas, hpaSeen(h), pod.Name, peak)
	}, waitOpts(ns))
	scaledOut := time.Since(loaded)
	waitSettled(t, ns, name, maxReplicas)
	stop()
	t.Logf("FIGURE realnode: under %d clients (%d requests answered) the HPA scaled %d -> %d in %s (pod %s used %s CPU; request 10m)",
		loadWorkers, served.Load(), minReplicas, maxReplicas, scaledOut.Round(time.Millisecond), pod.Name, peak)

	idle := time.Now()
	testkit.WaitFor(t, timeout, fmt.Sprintf("the HPA scaling back to %d pod without load", minReplicas), func(ctx context.Context) (bool, string) {
		d, h, err := scaleState(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		return *d.Spec.Replicas == minReplicas, fmt.Sprintf("Deployment replicas %d; HPA %s", *d.Spec.Replicas, hpaSeen(h))
	}, waitOpts(ns))
	a = waitSettled(t, ns, name, minReplicas)
	t.Logf("FIGURE realnode: without load the HPA scaled %d -> %d in %s (downscale stabilization %s)",
		maxReplicas, minReplicas, time.Since(idle).Round(time.Millisecond), hpaDownscaleStabilization)
	body, err := get(ctx, a.serviceURL())
	if err != nil || trim(body) != msg {
		t.Errorf("after scaling in, the Service answered %q (%v), want %q", body, err, msg)
	}
}

// startLoad keeps loadWorkers clients sending requests to url, on kept-alive
// connections, until stop is called; served counts the answers.
func startLoad(ctx context.Context, url string) (stop func(), served *atomic.Int64) {
	ctx, cancel := context.WithCancel(ctx)
	served = &atomic.Int64{}
	c := env.node.HTTPClient(true)
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				served.Add(1)
			}
		})
	}
	return func() { cancel(); wg.Wait() }, served
}

// scaleState reads the app's Deployment and HPA (both named <app>-web).
func scaleState(ctx context.Context, ns, name string) (*appsv1.Deployment, *autoscalingv2.HorizontalPodAutoscaler, error) {
	key := client.ObjectKey{Namespace: ns, Name: name + "-web"}
	var d appsv1.Deployment
	var h autoscalingv2.HorizontalPodAutoscaler
	if err := env.C.Get(ctx, key, &d); err != nil {
		return nil, nil, err
	}
	if err := env.C.Get(ctx, key, &h); err != nil {
		return nil, nil, err
	}
	return &d, &h, nil
}

func hpaSeen(h *autoscalingv2.HorizontalPodAutoscaler) string {
	s := fmt.Sprintf("current %d desired %d", h.Status.CurrentReplicas, h.Status.DesiredReplicas)
	for _, m := range h.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Current.AverageUtilization != nil {
			s += fmt.Sprintf(", CPU %d%% of the request", *m.Resource.Current.AverageUtilization)
		}
	}
	return s
}

// podCPU is a pod's CPU use as the resource metrics API serves it; nil while
// metrics-server has none yet.
func podCPU(ctx context.Context, ns, pod string) (*resource.Quantity, error) {
	raw, err := env.CS.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces", ns, "pods", pod).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var m struct {
		Containers []struct {
			Usage map[string]resource.Quantity `json:"usage"`
		} `json:"containers"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if len(m.Containers) == 0 {
		return nil, nil
	}
	q := m.Containers[0].Usage["cpu"]
	return &q, nil
}
