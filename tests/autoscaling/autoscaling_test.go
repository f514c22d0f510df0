package autoscaling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

// The app's autoscaling and the load. The package's pods request 10m CPU, so
// 2m is 20% (idle: the HPA keeps minReplicas) and 40m is 400% (loaded: the
// HPA wants 5 × 400/50 = 40 pods and stops at maxReplicas).
const (
	minReplicas = 2
	maxReplicas = 5
	targetCPU   = 50 // percent of the CPU request
	idleCPU     = "2m"
	idlePercent = 20
	loadCPU     = "40m"
	// The HPA reads whole millicores, rounded up: a scrape interval that
	// kwok measures a little longer than metrics-server does turns 2m into
	// 2.001m and so 3m (30%).
	roundingPercent = 10
	// timeout of each wait: several metrics-server scrapes (10s apart) and
	// HPA syncs, on a loaded machine.
	timeout = 4 * time.Minute
)

// A SimpleWebApp under spec.autoscaling follows its load: the HPA in
// kube-controller-manager scales it out to maxReplicas when its pods' CPU use
// rises and back in to minReplicas when it falls. The operator never reverts
// an HPA decision, also not when it rolls a new message out at full scale,
// and the SimpleWebApp's status and `kubectl get swa` follow the pod count.
func TestScalesWithLoad(t *testing.T) {
	ns := testkit.Namespace(t, env.C, testkit.NS{Prefix: "autoscaling-", WaitForServiceAccount: true})
	const name = "shop"
	depName := name + "-web"
	opts := waitOpts(ns)

	// Every change of the Deployment's replicas, from before it exists.
	changes := watchReplicas(t, ns, depName)

	swa := &webappv1.SimpleWebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: webappv1.SimpleWebAppSpec{
			Replicas: ptr.To[int32](1), // not applied while the HPA owns the count
			Message:  "m0",
			Autoscaling: &webappv1.Autoscaling{
				MinReplicas: minReplicas, MaxReplicas: maxReplicas, TargetCPUUtilizationPercentage: targetCPU,
			},
		},
	}
	created := time.Now()
	if err := env.C.Create(t.Context(), swa); err != nil {
		t.Fatal(err)
	}
	load := &loadGen{ns: ns, cpu: idleCPU}

	// The whole chain works: kwok reports the pods' CPU use, metrics-server
	// serves it and the HPA reads it as utilization of the CPU request.
	testkit.WaitFor(t, timeout, fmt.Sprintf("the HPA to read %d%% CPU (+%d rounding) of %d pods", idlePercent, roundingPercent, minReplicas), func(ctx context.Context) (bool, string) {
		load.apply(t, ctx, depName)
		h, seen := hpa(ctx, ns, depName)
		if h == nil {
			return false, seen
		}
		u := cpuUtilization(h)
		return h.Status.CurrentReplicas == minReplicas && h.Status.DesiredReplicas == minReplicas &&
			u >= idlePercent && u <= idlePercent+roundingPercent, seen
	}, opts)
	metricsAfter := time.Since(created)
	s := status(t, ns, name)
	waitApp(t, ns, name, minReplicas, load, opts)

	// Load: the HPA scales out to maxReplicas.
	load.set(t, t.Context(), depName, loadCPU)
	loaded := time.Now()
	testkit.WaitFor(t, timeout, fmt.Sprintf("the HPA to scale the Deployment to %d", maxReplicas), func(ctx context.Context) (bool, string) {
		load.apply(t, ctx, depName)
		d, seen := deployment(ctx, ns, depName)
		return d != nil && *d.Spec.Replicas == maxReplicas, seen
	}, opts)
	scaledOut := time.Since(loaded)
	waitApp(t, ns, name, maxReplicas, load, opts)
	scaledOutReady := time.Since(loaded)
	changes.monotonic(t, loaded, time.Now(), +1)

	// A reconcile that writes the Deployment while the HPA owns its count: a
	// new message rolls new pods out at the HPA's 5, not at spec.replicas.
	update(t, ns, name, func(s *webappv1.SimpleWebApp) { s.Spec.Message = "m1" })
	rolled := time.Now()
	testkit.WaitFor(t, timeout, "the new message rolled out at full scale", func(ctx context.Context) (bool, string) {
		load.apply(t, ctx, depName)
		d, seen := deployment(ctx, ns, depName)
		if d == nil {
			return false, seen
		}
		done, why := testkit.DeploymentRolledOut(d)
		cur := &webappv1.SimpleWebApp{}
		if err := env.C.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cur); err != nil {
			return false, err.Error()
		}
		return done && cur.Status.ObservedGeneration == cur.Generation && ready(cur) && cur.Status.ReadyReplicas == maxReplicas,
			fmt.Sprintf("%s; rollout: %s; SimpleWebApp generation %d, observed %d, podsReady %s",
				seen, why, cur.Generation, cur.Status.ObservedGeneration, cur.Status.PodsReady)
	}, opts)
	changes.monotonic(t, loaded, time.Now(), +1)
	t.Logf("the message rolled out at %d pods in %s", maxReplicas, time.Since(rolled).Round(time.Millisecond))

	// What a user sees of the load: `kubectl top pods` (the same metrics API).
	testkit.WaitFor(t, timeout, fmt.Sprintf("kubectl top pods to show %d pods using %s each", maxReplicas, loadCPU), func(ctx context.Context) (bool, string) {
		load.apply(t, ctx, depName)
		out, err := env.Kubectl.Admin("top", "pods", "-n", ns, "--no-headers")
		if err != nil {
			return false, err.Error() // no metrics of the new pods yet
		}
		n := 0
		for line := range strings.Lines(out) {
			// NAME CPU(cores) MEMORY(bytes)
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			cpu, err := resource.ParseQuantity(f[1])
			if err != nil {
				t.Fatalf("kubectl top pods: CPU %q of %s: %v", f[1], f[0], err)
			}
			// Rounded up to whole millicores, as the HPA reads it.
			want := resource.MustParse(loadCPU)
			if m := cpu.MilliValue(); m >= want.MilliValue() && m <= want.MilliValue()+1 {
				n++
			}
		}
		return n == maxReplicas, strings.TrimSpace(out)
	}, opts)

	// Idle again: back in to minReplicas once the stabilization window passed.
	load.set(t, t.Context(), depName, idleCPU)
	idle := time.Now()
	testkit.WaitFor(t, timeout, fmt.Sprintf("the HPA to scale the Deployment in to %d", minReplicas), func(ctx context.Context) (bool, string) {
		load.apply(t, ctx, depName)
		d, seen := deployment(ctx, ns, depName)
		return d != nil && *d.Spec.Replicas == minReplicas, seen
	}, opts)
	scaledIn := time.Since(idle)
	waitApp(t, ns, name, minReplicas, load, opts)
	scaledInReady := time.Since(idle)
	changes.monotonic(t, idle, time.Now(), -1)

	// Nobody but the HPA set the count once it had: every change since its
	// first is its own, and spec.replicas (1) was never applied.
	changes.onlyHPA(t)
	if s.Status.Replicas != minReplicas {
		t.Errorf("status.replicas %d at the start, want %d", s.Status.Replicas, minReplicas)
	}

	t.Logf("FIGURE autoscaling: the HPA reads the new pods' CPU use %s after the SimpleWebApp is created (metrics-server scrapes every %s)",
		metricsAfter.Round(time.Second), localcluster.MetricResolution)
	t.Logf("FIGURE autoscaling: load → HPA scales %d → %d pods in %s; %d/%d Ready in status and kubectl get swa after %s (HPA sync %s)",
		minReplicas, maxReplicas, scaledOut.Round(time.Second), maxReplicas, maxReplicas, scaledOutReady.Round(time.Second), hpaSyncPeriod)
	t.Logf("FIGURE autoscaling: idle → HPA scales %d → %d pods in %s; %d/%d Ready in status and kubectl get swa after %s (downscale stabilization %s)",
		maxReplicas, minReplicas, scaledIn.Round(time.Second), minReplicas, minReplicas, scaledInReady.Round(time.Second), hpaDownscaleStabilization)
	t.Logf("replicas of %s over the test: %s", depName, changes)
}

// waitApp waits until n pods are Ready and the SimpleWebApp's status and
// `kubectl get swa` say so, with the Ready condition true.
func waitApp(t *testing.T, ns, name string, n int32, load *loadGen, opts testkit.WaitOption) {
	t.Helper()
	want := fmt.Sprintf("%d/%d", n, n)
	testkit.WaitFor(t, timeout, fmt.Sprintf("status and kubectl get swa to show %s Ready", want), func(ctx context.Context) (bool, string) {
		load.apply(t, ctx, name+"-web")
		s := &webappv1.SimpleWebApp{}
		if err := env.C.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
			return false, err.Error()
		}
		seen := fmt.Sprintf("status: replicas %d, readyReplicas %d, podsReady %q, Ready %v",
			s.Status.Replicas, s.Status.ReadyReplicas, s.Status.PodsReady, ready(s))
		if s.Status.Replicas != n || s.Status.ReadyReplicas != n || s.Status.PodsReady != want || !ready(s) {
			return false, seen
		}
		out, err := env.Kubectl.Admin("get", "swa", name, "-n", ns, "--no-headers")
		if err != nil {
			return false, err.Error()
		}
		// NAME READY STATUS VERSION CHANNEL AGE
		f := strings.Fields(out)
		return len(f) > 2 && f[1] == want && f[2] == webappv1.ReasonAvailable, seen + "; kubectl get swa: " + strings.TrimSpace(out)
	}, opts)
}

func ready(s *webappv1.SimpleWebApp) bool {
	return apimeta.IsStatusConditionTrue(s.Status.Conditions, webappv1.ConditionReady)
}

func status(t *testing.T, ns, name string) *webappv1.SimpleWebApp {
	t.Helper()
	s := &webappv1.SimpleWebApp{}
	if err := env.C.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// update re-reads the SimpleWebApp, changes it and writes it back, again on
// a conflict (the operator writes its status).
func update(t *testing.T, ns, name string, change func(*webappv1.SimpleWebApp)) {
	t.Helper()
	for range 10 {
		s := status(t, ns, name)
		change(s)
		err := env.C.Update(t.Context(), s)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatalf("updating SimpleWebApp %s/%s: conflicts 10 times", ns, name)
}

func deployment(ctx context.Context, ns, name string) (*appsv1.Deployment, string) {
	d := &appsv1.Deployment{}
	if err := env.C.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
		return nil, err.Error()
	}
	return d, fmt.Sprintf("Deployment: replicas %d (spec), %d ready, %d updated", ptr.Deref(d.Spec.Replicas, 0),
		d.Status.ReadyReplicas, d.Status.UpdatedReplicas)
}

func hpa(ctx context.Context, ns, name string) (*autoscalingv2.HorizontalPodAutoscaler, string) {
	h := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := env.C.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, h); err != nil {
		return nil, err.Error()
	}
	var conds []string
	for _, c := range h.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return h, fmt.Sprintf("HPA: current %d, desired %d, CPU %d%%; %s", h.Status.CurrentReplicas, h.Status.DesiredReplicas,
		cpuUtilization(h), strings.Join(conds, "; "))
}

// cpuUtilization is the HPA's last reading of its CPU metric (-1: none).
func cpuUtilization(h *autoscalingv2.HorizontalPodAutoscaler) int32 {
	for _, m := range h.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Name == corev1.ResourceCPU && m.Resource.Current.AverageUtilization != nil {
			return *m.Resource.Current.AverageUtilization
		}
	}
	return -1
}

// waitOpts: a wait ends at once if the operator exits, and a failure shows
// the operator's log tail and the app as kubectl shows it.
func waitOpts(ns string) testkit.WaitOption {
	return testkit.Options(
		testkit.Every(200*time.Millisecond),
		testkit.Abort(func() error {
			if exited, err := env.op.Exited(); exited {
				return fmt.Errorf("the operator exited: %v", err)
			}
			return nil
		}),
		testkit.Diag(func() string {
			return fmt.Sprintf("--- operator log tail (%s) ---\n%s", env.op.LogPath(), env.op.LogTail(30))
		}),
		testkit.Diag(func() string {
			var b strings.Builder
			for _, args := range [][]string{
				{"get", "simplewebapps,hpa,deployments,pods", "-n", ns, "-o", "wide"},
				{"describe", "hpa", "-n", ns},
				{"get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/" + ns + "/pods"},
			} {
				out, err := env.Kubectl.Admin(args...)
				fmt.Fprintf(&b, "--- kubectl %s ---\n%s", strings.Join(args, " "), out)
				if err != nil {
					fmt.Fprintf(&b, "%v\n", err)
				}
			}
			fmt.Fprintf(&b, "--- metrics-server log tail ---\n%s\n", env.Cluster.LogTail(localcluster.MetricsServer, 20))
			return b.String()
		}),
	)
}

// loadGen is the simulated load: the CPU use of every pod of the app, set as
// kwok's usage annotation, also on pods that the HPA adds.
type loadGen struct {
	ns  string
	cpu string // a quantity
}

// set changes the load and applies it to the pods there are now.
func (l *loadGen) set(t *testing.T, ctx context.Context, depName, cpu string) {
	t.Helper()
	l.cpu = cpu
	l.apply(t, ctx, depName)
}

// apply sets the load on the pods of the Deployment that lack it.
func (l *loadGen) apply(t *testing.T, ctx context.Context, depName string) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := env.C.Get(ctx, types.NamespacedName{Namespace: l.ns, Name: depName}, d); err != nil {
		if apierrors.IsNotFound(err) {
			return // not rendered yet
		}
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := env.C.List(ctx, &pods, client.InNamespace(l.ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, localcluster.UsageCPUAnnotation, l.cpu)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Annotations[localcluster.UsageCPUAnnotation] == l.cpu {
			continue
		}
		if err := env.C.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("setting the load on pod %s: %v", p.Name, err)
		}
	}
}

// replicasChange is one change of a Deployment's spec.replicas, seen by a
// watch, with the field managers that own spec.replicas after it.
type replicasChange struct {
	at       time.Time
	replicas int32
	owners   []string // "manager/operation[/subresource]"
}

type replicasLog struct {
	mu      sync.Mutex
	changes []replicasChange
	err     error // the watch's, if it ended early
}

// watchReplicas records every change of spec.replicas of Deployment ns/name
// from now on, until the test ends.
func watchReplicas(t *testing.T, ns, name string) *replicasLog {
	t.Helper()
	list, err := env.CS.AppsV1().Deployments(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "metadata.name=" + name
		return env.CS.AppsV1().Deployments(ns).Watch(ctx, o)
	}}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l := &replicasLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var last int32 = -1
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				l.mu.Lock()
				l.err = apierrors.FromObject(ev.Object)
				l.mu.Unlock()
				continue
			}
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			r := ptr.Deref(d.Spec.Replicas, 1)
			if r == last {
				continue
			}
			last = r
			l.mu.Lock()
			l.changes = append(l.changes, replicasChange{at: time.Now(), replicas: r, owners: testkit.ReplicasOwners(d)})
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		cancel()
		<-done
	})
	return l
}

func (l *replicasLog) snapshot(t *testing.T) []replicasChange {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		t.Fatalf("watching the Deployment: %v", l.err)
	}
	return slices.Clone(l.changes)
}

// monotonic checks that the replicas only went in direction (+1 up, -1
// down) between from and to: a change the other way would be a revert.
func (l *replicasLog) monotonic(t *testing.T, from, to time.Time, direction int) {
	t.Helper()
	var prev *replicasChange
	for _, c := range l.snapshot(t) {
		if c.at.Before(from) {
			prev = &c
			continue
		}
		if c.at.After(to) {
			break
		}
		if prev != nil && int(c.replicas-prev.replicas)*direction < 0 {
			t.Errorf("replicas went %d → %d (owners %v) while the load asked for the other direction; all changes: %s",
				prev.replicas, c.replicas, c.owners, l)
		}
		prev = &c
	}
}

// hpaManager is the field manager of the HPA's writes: kube-controller-manager
// through the Deployment's scale subresource.
const hpaManager = "kube-controller-manager/Update/scale"

// onlyHPA checks that from the HPA's first change on, every change of the
// replicas is owned by the HPA alone, never by one of the operator's
// managers.
func (l *replicasLog) onlyHPA(t *testing.T) {
	t.Helper()
	hpaSeen := false
	for _, c := range l.snapshot(t) {
		if slices.Equal(c.owners, []string{hpaManager}) {
			hpaSeen = true
			continue
		}
		for _, o := range c.owners {
			if strings.HasPrefix(o, render.ManagerName) && hpaSeen {
				t.Errorf("the operator (%s) set the replicas to %d after the HPA had set them; all changes: %s", o, c.replicas, l)
			}
		}
		if hpaSeen {
			t.Errorf("replicas %d owned by %v, not by the HPA (%s) alone; all changes: %s", c.replicas, c.owners, hpaManager, l)
		}
	}
	if !hpaSeen {
		t.Errorf("no change of the replicas by the HPA (%s); all changes: %s", hpaManager, l)
	}
}

func (l *replicasLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	var t0 time.Time
	for i, c := range l.changes {
		if i == 0 {
			t0 = c.at
		}
		parts = append(parts, fmt.Sprintf("%d at +%s by %v", c.replicas, c.at.Sub(t0).Round(100*time.Millisecond), c.owners))
	}
	return strings.Join(parts, ", ")
}
