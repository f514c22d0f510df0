package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// tracker follows SimpleWebApps and Deployments through one watch each
// (an informer), so that waiting for 1000 of them costs the API server
// nothing but the watch.
type tracker struct {
	mu     sync.Mutex
	apps   map[string]*webappv1.SimpleWebApp
	deps   map[string]*appsv1.Deployment
	maxUpg int // most SimpleWebApps with status.upgrade set at once
	cancel context.CancelFunc
}

func newTracker(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (*tracker, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	t := &tracker{apps: map[string]*webappv1.SimpleWebApp{}, deps: map[string]*appsv1.Deployment{}, cancel: cancel}
	for _, o := range []client.Object{&webappv1.SimpleWebApp{}, &appsv1.Deployment{}} {
		inf, err := c.GetInformer(ctx, o)
		if err != nil {
			cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { t.set(obj, false) },
			UpdateFunc: func(_, obj any) { t.set(obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				t.set(obj, true)
			},
		}); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("tracker: caches did not sync")
	}
	return t, nil
}

func (t *tracker) stop() { t.cancel() }

func (t *tracker) set(obj any, deleted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch o := obj.(type) {
	case *webappv1.SimpleWebApp:
		k := o.Namespace + "/" + o.Name
		if deleted {
			delete(t.apps, k)
		} else {
			t.apps[k] = o
		}
		n := 0
		for _, a := range t.apps {
			if a.Status.Upgrade != nil {
				n++
			}
		}
		t.maxUpg = max(t.maxUpg, n)
	case *appsv1.Deployment:
		k := o.Namespace + "/" + o.Name
		if deleted {
			delete(t.deps, k)
		} else {
			t.deps[k] = o
		}
	}
}

// appCounts are how many SimpleWebApps are in each state.
type appCounts struct {
	total, applied, ready, upgrading, failedUpgrade int
	atVersion                                       map[string]int // ready at a version
}

func (t *tracker) counts() appCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := appCounts{atVersion: map[string]int{}}
	for _, a := range t.apps {
		c.total++
		// Applied: the generation is observed and its Deployment, the last
		// object the operator creates, exists. observedGeneration alone
		// would count an app when its inventory is recorded, before its
		// objects are created.
		if a.Status.ObservedGeneration >= a.Generation && t.hasWorkload(a) {
			c.applied++
		}
		if r := apimeta.FindStatusCondition(a.Status.Conditions, webappv1.ConditionReady); r != nil &&
			r.Status == metav1.ConditionTrue && r.ObservedGeneration >= a.Generation && a.Status.ObservedGeneration >= a.Generation {
			c.ready++
			c.atVersion[a.Status.Version]++
		}
		if a.Status.Upgrade != nil {
			c.upgrading++
		}
		if a.Status.FailedUpgrade != nil {
			c.failedUpgrade++
		}
	}
	return c
}

// hasWorkload reports whether the Deployment a's inventory names exists.
func (t *tracker) hasWorkload(a *webappv1.SimpleWebApp) bool {
	for _, r := range a.Status.Inventory {
		if r.Group == "apps" && r.Kind == "Deployment" {
			_, ok := t.deps[a.Namespace+"/"+r.Name]
			return ok
		}
	}
	return false
}

// readyDeployments counts Deployments whose every replica is updated and
// available.
func (t *tracker) readyDeployments() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, d := range t.deps {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want && d.Status.AvailableReplicas == want && d.Status.Replicas == want {
			n++
		}
	}
	return n
}

func (t *tracker) resetMaxUpgrades() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maxUpg = 0
}

func (t *tracker) maxUpgrades() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxUpg
}

// waitUntil polls cond (in memory) every 50ms until it holds or timeout
// passes, logging progress every 15 s; it returns the time it took and
// whether it held.
// runCtx ends with SIGINT or SIGTERM, so a wait ends with it and the
// clusters are stopped.
var runCtx = context.Background()

func waitUntil(timeout time.Duration, cond func() bool, progress func() string) (time.Duration, bool) {
	t0 := time.Now()
	lastLog := t0
	took, _, err := testkit.Poll(runCtx, 50*time.Millisecond, timeout, func(context.Context) (bool, string, error) {
		if cond() {
			return true, "", nil
		}
		if time.Since(lastLog) > 15*time.Second {
			logf("  ... %s: %s", time.Since(t0).Round(time.Second), progress())
			lastLog = time.Now()
		}
		return false, "", nil
	})
	if err != nil {
		logf("  timed out after %s: %s", timeout, progress())
		return took, false
	}
	return took, true
}

// quartiles records when a count of done apps first reached a quarter, half,
// three quarters and all of n.
type quartiles struct {
	mu    sync.Mutex
	n     int
	start time.Time
	at    [4]float64
}

func newQuartiles(n int, start time.Time) *quartiles { return &quartiles{n: n, start: start} }

func (q *quartiles) observe(done int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.at {
		if q.at[i] == 0 && done*4 >= q.n*(i+1) {
			q.at[i] = time.Since(q.start).Seconds()
		}
	}
}

func (q *quartiles) seconds() []float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.at[:]
}
