package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/controllers"
)

type phase struct {
	Seconds  float64  `json:"seconds"`
	Requests requests `json:"requests"`
}

type opResult struct {
	CreateSeconds  float64 `json:"createSeconds"`
	AppliedSeconds float64 `json:"appliedSeconds"`
	// AppliedQuartiles: seconds until a quarter, half, three quarters of
	// the apps were applied (and all): the rate, and whether a tail is slow.
	AppliedQuartiles []float64 `json:"appliedQuartiles"`
	ReadySeconds     float64   `json:"readySeconds"`
	QuietSeconds     float64   `json:"quietSeconds"`
	Objects          int       `json:"objects"`
	Requests         requests  `json:"requests"`
	Reconciles       float64   `json:"reconciles"`
	Stats            procStats `json:"stats"`
	CPUSeconds       float64   `json:"cpuSecondsCreateToQuiet"`
	// ControlPlaneCPU: CPU seconds per control-plane process from the
	// first create until applied; OperatorCPUToApplied the operator's.
	ControlPlaneCPU      map[string]float64 `json:"controlPlaneCPUSecondsToApplied"`
	OperatorCPUToApplied float64            `json:"operatorCPUSecondsToApplied"`

	Restart struct {
		phase
		ObjectsChanged int       `json:"objectsChanged"`
		ObjectsChecked int       `json:"objectsChecked"`
		Reconciles     float64   `json:"reconciles"`
		Stats          procStats `json:"stats"`
	} `json:"restart"`
	ChildStatus phase `json:"childStatusChange"`
	DriftDelete phase `json:"driftDelete"`
	DriftEdit   phase `json:"driftEdit"`
	ChannelMove *struct {
		phase
		MaxInFlight    int     `json:"maxUpgradesInFlight"`
		FailedUpgrades int     `json:"failedUpgrades"`
		Rollbacks      float64 `json:"rollbacksMetric"`
	} `json:"channelMove,omitempty"`
	HeapTop  string             `json:"heapTop,omitempty"`
	MemStats map[string]float64 `json:"memStatsAfterRestart,omitempty"`
}

// runOperator measures one operator build on its own cluster: create N
// SimpleWebApps, restart, a child's status change, drift, a channel move.
func runOperator(ctx context.Context, dir, root, bin, name string, o opts, channelMove, pprof bool) (*opResult, error) {
	e, err := newEnv(ctx, dir, root, o)
	if e != nil {
		defer e.stop()
	}
	if err != nil {
		return nil, err
	}
	cdir := filepath.Join(dir, "channels")
	if err := writeChannel(cdir, fromVersion); err != nil {
		return nil, err
	}
	args := []string{"--channels-dir=" + cdir, "--channels-poll-interval=1s"}
	if name == "operator" && o.operatorArgs != "" {
		args = append(args, strings.Fields(o.operatorArgs)...)
	}
	// The operator inherits the environment: GOGC and GOMEMLIMIT as its
	// Deployment sets them (runtimeEnvOfDeployment), for this build only.
	for k, v := range map[string]string{"GOGC": o.gogc, "GOMEMLIMIT": o.gomemlimit} {
		os.Unsetenv(k)
		if name == "operator" && v != "" {
			os.Setenv(k, v)
		}
	}
	op, err := startOperator(ctx, e, bin, name, pprof, args)
	if err != nil {
		return nil, err
	}
	defer func() { op.Kill() }()
	res := &opResult{}

	// Create N SimpleWebApps, o.workers in flight.
	cpuProfiled := make(chan struct{})
	if pprof {
		// Where the operator's CPU goes while it converges.
		go func() {
			defer close(cpuProfiled)
			if err := op.cpuProfile(filepath.Join(o.out, fmt.Sprintf("cpu-n%d-ns%d.pb.gz", o.n, o.namespaces)), 20*time.Second); err != nil {
				logf("  CPU profile: %v", err)
			}
		}()
		go func() {
			// The API server's side of the same 20 s.
			if err := apiServerCPUProfile(e.Cluster, filepath.Join(o.out, fmt.Sprintf("apiserver-cpu-n%d-ns%d.pb.gz", o.n, o.namespaces)), 20*time.Second); err != nil {
				logf("  kube-apiserver CPU profile: %v", err)
			}
		}()
	} else {
		close(cpuProfiled)
	}
	if err := warmUp(ctx, e.C, o); err != nil {
		return nil, fmt.Errorf("warm-up: %w\n%s", err, op.LogTail(20))
	}
	cpu0 := statsOf(op.Pid()).CPUSeconds
	cp0 := controlPlaneCPU(e.Cluster)
	mark := e.audit.mark()
	t0 := time.Now()
	if err := createApps(ctx, e.C, o); err != nil {
		return nil, err
	}
	res.CreateSeconds = time.Since(t0).Seconds()
	logf("  created %d SimpleWebApps in %.1fs", o.n, res.CreateSeconds)
	progress := func() string {
		c := e.track.counts()
		return fmt.Sprintf("%d apps, %d applied, %d ready", c.total, c.applied, c.ready)
	}
	quartiles := newQuartiles(o.n, t0)
	if _, ok := waitUntil(20*time.Minute, func() bool {
		c := e.track.counts()
		quartiles.observe(c.applied)
		return c.total >= o.n && c.applied >= o.n
	}, progress); !ok {
		return nil, fmt.Errorf("not applied\n%s", op.LogTail(20))
	}
	res.AppliedSeconds = time.Since(t0).Seconds()
	res.AppliedQuartiles = quartiles.seconds()
	res.ControlPlaneCPU = cpuSince(e.Cluster, cp0)
	res.OperatorCPUToApplied = statsOf(op.Pid()).CPUSeconds - cpu0
	logf("  all applied after %.1fs", res.AppliedSeconds)
	if _, ok := waitUntil(30*time.Minute, func() bool { c := e.track.counts(); return c.ready >= o.n }, progress); !ok {
		return nil, fmt.Errorf("not ready\n%s", op.LogTail(20))
	}
	res.ReadySeconds = time.Since(t0).Seconds()
	logf("  all Ready after %.1fs", res.ReadySeconds)
	if !e.audit.waitQuiet(operatorUser, o.quiet, 10*time.Minute) {
		logf("  the operator did not go quiet within 10 minutes")
	}
	res.QuietSeconds = time.Since(t0).Seconds() - o.quiet.Seconds()
	res.Requests = summarise(e.audit.since(mark, operatorUser), false)
	res.Reconciles = op.reconciles()
	res.Stats = statsOf(op.Pid())
	res.CPUSeconds = res.Stats.CPUSeconds - cpu0
	objs, err := childVersions(ctx, e.C)
	if err != nil {
		return nil, err
	}
	res.Objects = len(objs)
	logf("  quiet; %d requests (%s), %.0f reconciles, %.1f CPU s, peak RSS %.0f MiB", res.Requests.Total, res.Requests.verbs(), res.Reconciles, res.CPUSeconds, res.Stats.PeakRSSMiB)
	logf("  RSS now %.0f MiB (anonymous %.0f, file %.0f)", res.Stats.RSSMiB, res.Stats.RSSAnonMiB, res.Stats.RSSFileMiB)

	<-cpuProfiled
	// Restart with nothing changed.
	before, err := allVersions(ctx, e.C)
	if err != nil {
		return nil, err
	}
	if err := op.Stop(time.Minute); err != nil {
		return nil, err
	}
	mark = e.audit.mark()
	t0 = time.Now()
	if op, err = startOperator(ctx, e, bin, name+"-restarted", pprof, args); err != nil {
		return nil, err
	}
	e.audit.waitQuiet(operatorUser, o.quiet, 5*time.Minute)
	res.Restart.Seconds = time.Since(t0).Seconds() - o.quiet.Seconds()
	res.Restart.Requests = summarise(e.audit.since(mark, operatorUser), true)
	res.Restart.Reconciles = op.reconciles()
	res.Restart.Stats = statsOf(op.Pid())
	after, err := allVersions(ctx, e.C)
	if err != nil {
		return nil, err
	}
	res.Restart.ObjectsChecked = len(before)
	for k, rv := range before {
		if after[k] != rv {
			res.Restart.ObjectsChanged++
		}
	}
	logf("  restart: %d requests (%s), %d of %d objects changed, RSS %.0f MiB (anonymous %.0f, file %.0f)", res.Restart.Requests.Total, res.Restart.Requests.verbs(), res.Restart.ObjectsChanged, len(before), res.Restart.Stats.RSSMiB, res.Restart.Stats.RSSAnonMiB, res.Restart.Stats.RSSFileMiB)
	if pprof {
		top, err := op.heapProfile(filepath.Join(o.out, fmt.Sprintf("heap-n%d-ns%d.pb.gz", o.n, o.namespaces)))
		if err != nil {
			logf("  heap profile: %v", err)
		}
		res.HeapTop = top
		res.MemStats = op.memStats()
		logf("  memory after the restart: %v", res.MemStats)
	}

	// A child's status change: a pod of app-0 goes away and comes back.
	if res.ChildStatus, err = childStatusChange(ctx, e, o); err != nil {
		return nil, err
	}
	logf("  child status change: %d requests (%s) %v", res.ChildStatus.Requests.Total, res.ChildStatus.Requests.verbs(), res.ChildStatus.Requests.Objects)
	if res.DriftDelete, err = driftDelete(ctx, e, o); err != nil {
		return nil, err
	}
	logf("  drift (deleted Service): back after %.2fs; %v", res.DriftDelete.Seconds, res.DriftDelete.Requests.Objects)
	if res.DriftEdit, err = driftEdit(ctx, e, o); err != nil {
		return nil, err
	}
	logf("  drift (edited Service label): back after %.2fs; %v", res.DriftEdit.Seconds, res.DriftEdit.Requests.Objects)

	if channelMove {
		cm := &struct {
			phase
			MaxInFlight    int     `json:"maxUpgradesInFlight"`
			FailedUpgrades int     `json:"failedUpgrades"`
			Rollbacks      float64 `json:"rollbacksMetric"`
		}{}
		e.track.resetMaxUpgrades()
		mark = e.audit.mark()
		t0 = time.Now()
		if err := writeChannel(cdir, fromVersion, toVersion); err != nil {
			return nil, err
		}
		_, ok := waitUntil(40*time.Minute, func() bool { c := e.track.counts(); return c.atVersion[toVersion] >= o.n && c.upgrading == 0 },
			func() string {
				c := e.track.counts()
				return fmt.Sprintf("%d ready at %s, %d upgrading, %d failed upgrades", c.atVersion[toVersion], toVersion, c.upgrading, c.failedUpgrade)
			})
		cm.Seconds = time.Since(t0).Seconds()
		e.audit.waitQuiet(operatorUser, o.quiet, 5*time.Minute)
		cm.Requests = summarise(e.audit.since(mark, operatorUser), false)
		cm.MaxInFlight = e.track.maxUpgrades()
		cm.FailedUpgrades = e.track.counts().failedUpgrade
		cm.Rollbacks = op.scrape("simplewebapp_rollbacks_total", nil)
		res.ChannelMove = cm
		logf("  channel move (complete=%v): %.1fs, max %d upgrades in flight, %d failed upgrades, %d requests", ok, cm.Seconds, cm.MaxInFlight, cm.FailedUpgrades, cm.Requests.Total)
	}
	return res, nil
}

// warmUp has the operator apply one SimpleWebApp, then deletes it and waits
// until its objects are gone, all before the clock: as the bare client's
// dry-run create and renders come before its clock. The operator has then
// started its workers (its /readyz answers before its caches have synced),
// built the package's render template, and the API server has served a
// SimpleWebApp create; a start that took a second or two more in some runs
// no longer counts against it.
func warmUp(ctx context.Context, c client.Client, o opts) error {
	app := newApp(0, o)
	app.Name = "warm-up"
	if err := c.Create(ctx, app); err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(app)
	instance := client.MatchingLabels{controllers.LabelInstance: app.Name}
	left := func() (int, error) {
		n := 0
		for _, l := range childLists() {
			if err := c.List(ctx, l, client.InNamespace(app.Namespace), instance); err != nil {
				return 0, err
			}
			n += apimeta.LenList(l)
		}
		return n, nil
	}
	if _, ok := waitUntil(2*time.Minute, func() bool {
		n, err := left()
		return c.Get(ctx, key, app) == nil && app.Status.ObservedGeneration >= app.Generation && err == nil && n > 0 && n == len(app.Status.Inventory)
	}, func() string { return "the warm-up app applied" }); !ok {
		return fmt.Errorf("the warm-up app was not applied")
	}
	if err := c.Delete(ctx, app); err != nil {
		return err
	}
	if _, ok := waitUntil(2*time.Minute, func() bool {
		n, err := left()
		return apierrors.IsNotFound(c.Get(ctx, key, app)) && err == nil && n == 0
	}, func() string { return "the warm-up app and its objects deleted" }); !ok {
		return fmt.Errorf("the warm-up app or its objects were not deleted")
	}
	return nil
}

func createApps(ctx context.Context, c client.Client, o opts) error {
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := c.Create(ctx, newApp(i, o)); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			}
		}()
	}
	for i := range o.n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// childLists are empty lists of the kinds the bench's apps are made of.
func childLists() []client.ObjectList {
	return []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}}
}

// childVersions are the resourceVersions of every managed child.
func childVersions(ctx context.Context, c client.Client) (map[string]string, error) {
	out := map[string]string{}
	sel := client.MatchingLabels{controllers.LabelManagedBy: controllers.ManagerName}
	for _, l := range childLists() {
		if err := c.List(ctx, l, sel); err != nil {
			return nil, err
		}
		items, _ := metaItems(l)
		for _, m := range items {
			out[fmt.Sprintf("%T %s/%s", l, m.GetNamespace(), m.GetName())] = m.GetResourceVersion()
		}
	}
	return out, nil
}

// allVersions adds the SimpleWebApps to childVersions.
func allVersions(ctx context.Context, c client.Client) (map[string]string, error) {
	out, err := childVersions(ctx, c)
	if err != nil {
		return nil, err
	}
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(schemeGVK("example.com", "v1", "SimpleWebAppList"))
	if err := c.List(ctx, l); err != nil {
		return nil, err
	}
	for _, m := range l.Items {
		out["SimpleWebApp "+m.Namespace+"/"+m.Name] = m.ResourceVersion
	}
	return out, nil
}

// childStatusChange deletes app-0's pod: the ReplicaSet makes another, and
// the Deployment's status goes down and up again.
func childStatusChange(ctx context.Context, e *env, o opts) (phase, error) {
	app := newApp(0, o)
	sel := client.MatchingLabels{controllers.LabelInstance: app.Name}
	pods := &corev1.PodList{}
	if err := e.C.List(ctx, pods, client.InNamespace(app.Namespace), sel); err != nil || len(pods.Items) == 0 {
		return phase{}, fmt.Errorf("pods of %s: %d, %v", app.Name, len(pods.Items), err)
	}
	old := pods.Items[0].Name
	mark := e.audit.mark()
	t0 := time.Now()
	if err := e.C.Delete(ctx, &pods.Items[0]); err != nil {
		return phase{}, err
	}
	_, ok := waitUntil(2*time.Minute, func() bool {
		l := &corev1.PodList{}
		if e.C.List(ctx, l, client.InNamespace(app.Namespace), sel) != nil {
			return false
		}
		for _, p := range l.Items {
			if p.Name != old && p.DeletionTimestamp == nil && podReady(&p) {
				return true
			}
		}
		return false
	}, func() string { return "a new ready pod of " + app.Name })
	if !ok {
		return phase{}, fmt.Errorf("no new pod of %s", app.Name)
	}
	d := time.Since(t0)
	e.audit.waitQuiet(operatorUser, o.quiet, 2*time.Minute)
	return phase{Seconds: d.Seconds(), Requests: summarise(e.audit.since(mark, operatorUser), true)}, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// driftDelete deletes app-1's Service and times until it is back.
func driftDelete(ctx context.Context, e *env, o opts) (phase, error) {
	app := newApp(1%o.n, o)
	key := types.NamespacedName{Namespace: app.Namespace, Name: app.Name + "-web"}
	svc := &corev1.Service{}
	if err := e.C.Get(ctx, key, svc); err != nil {
		return phase{}, err
	}
	uid := svc.UID
	mark := e.audit.mark()
	if err := e.C.Delete(ctx, svc); err != nil {
		return phase{}, err
	}
	d, ok := waitUntil(time.Minute, func() bool {
		s := &corev1.Service{}
		return e.C.Get(ctx, key, s) == nil && s.UID != uid
	}, func() string { return "Service " + key.String() + " back" })
	if !ok {
		return phase{}, fmt.Errorf("Service %s not recreated", key)
	}
	e.audit.waitQuiet(operatorUser, o.quiet, 2*time.Minute)
	return phase{Seconds: d.Seconds(), Requests: summarise(e.audit.since(mark, operatorUser), true)}, nil
}

// driftEdit changes a label the operator set on app-2's Service, as another
// field manager, and times until it is back.
func driftEdit(ctx context.Context, e *env, o opts) (phase, error) {
	app := newApp(2%o.n, o)
	key := types.NamespacedName{Namespace: app.Namespace, Name: app.Name + "-web"}
	const label = "app.kubernetes.io/component"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	mark := e.audit.mark()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+label+`":"hand-edited"}}}`))
	if err := e.C.Patch(ctx, svc, patch, client.FieldOwner("bench-hand-edit")); err != nil {
		return phase{}, err
	}
	d, ok := waitUntil(time.Minute, func() bool {
		s := &corev1.Service{}
		return e.C.Get(ctx, key, s) == nil && s.Labels[label] == "web"
	}, func() string { return "label of Service " + key.String() + " back" })
	if !ok {
		return phase{}, fmt.Errorf("label of Service %s not corrected", key)
	}
	e.audit.waitQuiet(operatorUser, o.quiet, 2*time.Minute)
	return phase{Seconds: d.Seconds(), Requests: summarise(e.audit.since(mark, operatorUser), true)}, nil
}
