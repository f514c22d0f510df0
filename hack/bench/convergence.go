package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/render"
)

// convergeStart is where the clock of the convergence starts: what its
// figures are measured from.
type convergeStart struct {
	t0   time.Time
	mark int                // the audit log's
	cpu0 float64            // the operator's CPU seconds
	cp0  map[string]float64 // the control plane's, by process
}

// profileConvergence saves CPU profiles of the operator and the API server
// over the first 20 s of the convergence, with -pprof; the returned channel
// is closed once the operator's is saved (at once without -pprof).
func (r *opRun) profileConvergence() <-chan struct{} {
	return r.profile("", 20*time.Second)
}

// profile saves CPU profiles of the operator and the API server over the
// next d, named after phase, with -pprof; the returned channel is closed
// once the operator's is saved (at once without -pprof).
func (r *opRun) profile(phase string, d time.Duration) <-chan struct{} {
	o := r.o
	cpuProfiled := make(chan struct{})
	if !r.pprof {
		close(cpuProfiled)
		return cpuProfiled
	}
	name := func(what string) string {
		if phase != "" {
			what += "-" + phase
		}
		return filepath.Join(o.out, fmt.Sprintf("%s-n%d-ns%d.pb.gz", what, o.n, o.namespaces))
	}
	// Where the operator's CPU goes.
	go func() {
		defer close(cpuProfiled)
		if err := r.op.cpuProfile(name("cpu"), d); err != nil {
			logf("  CPU profile: %v", err)
		}
	}()
	go func() {
		// The API server's side of the same time.
		if err := apiServerCPUProfile(r.e.Cluster, name("apiserver-cpu"), d); err != nil {
			logf("  kube-apiserver CPU profile: %v", err)
		}
	}()
	return cpuProfiled
}

// converge creates N SimpleWebApps, o.workers in flight, and measures until
// the operator has applied them, they are Ready and it has gone quiet.
func (r *opRun) converge(ctx context.Context) error {
	if err := warmUp(ctx, r.e.C, r.o); err != nil {
		return fmt.Errorf("warm-up: %w\n%s", err, r.op.LogTail(20))
	}
	var start convergeStart
	start.cpu0 = statsOf(r.op.Pid()).CPUSeconds
	start.cp0 = controlPlaneCPU(r.e.Cluster)
	start.mark = r.e.audit.mark()
	start.t0 = time.Now()
	if err := r.createAndWaitApplied(ctx, start); err != nil {
		return err
	}
	return r.waitReadyAndQuiet(ctx, start)
}

// createAndWaitApplied creates the apps and waits until every one is
// applied, recording the quartiles and the CPU it took.
func (r *opRun) createAndWaitApplied(ctx context.Context, start convergeStart) error {
	e, o, res := r.e, r.o, r.res
	if err := createApps(ctx, e.C, o); err != nil {
		return err
	}
	res.CreateSeconds = time.Since(start.t0).Seconds()
	logf("  created %d SimpleWebApps in %.1fs", o.n, res.CreateSeconds)
	quartiles := newQuartiles(o.n, start.t0)
	if _, ok := waitUntil(20*time.Minute, func() bool {
		c := e.track.counts()
		quartiles.observe(c.applied)
		return c.total >= o.n && c.applied >= o.n
	}, r.progress); !ok {
		return fmt.Errorf("not applied\n%s", r.op.LogTail(20))
	}
	res.AppliedSeconds = time.Since(start.t0).Seconds()
	res.AppliedQuartiles = quartiles.seconds()
	res.ControlPlaneCPU = cpuSince(e.Cluster, start.cp0)
	res.OperatorCPUToApplied = statsOf(r.op.Pid()).CPUSeconds - start.cpu0
	logf("  all applied after %.1fs", res.AppliedSeconds)
	return nil
}

// waitReadyAndQuiet waits until every app is Ready and the operator has gone
// quiet, then records its requests, reconciles, CPU and memory since start.
func (r *opRun) waitReadyAndQuiet(ctx context.Context, start convergeStart) error {
	e, o, res := r.e, r.o, r.res
	if _, ok := waitUntil(30*time.Minute, func() bool { c := e.track.counts(); return c.ready >= o.n }, r.progress); !ok {
		return fmt.Errorf("not ready\n%s", r.op.LogTail(20))
	}
	res.ReadySeconds = time.Since(start.t0).Seconds()
	logf("  all Ready after %.1fs", res.ReadySeconds)
	if !e.audit.waitQuiet(operatorUser, o.quiet, 10*time.Minute) {
		logf("  the operator did not go quiet within 10 minutes")
	}
	res.QuietSeconds = time.Since(start.t0).Seconds() - o.quiet.Seconds()
	res.Requests = summarise(e.audit.since(start.mark, operatorUser), false)
	res.Reconciles = r.op.reconciles()
	res.Stats = statsOf(r.op.Pid())
	res.CPUSeconds = res.Stats.CPUSeconds - start.cpu0
	objs, err := childVersions(ctx, e.C)
	if err != nil {
		return err
	}
	res.Objects = len(objs)
	logf("  quiet; %d requests (%s), %.0f reconciles, %.1f CPU s, peak RSS %.0f MiB", res.Requests.Total, res.Requests.verbs(), res.Reconciles, res.CPUSeconds, res.Stats.PeakRSSMiB)
	logf("  RSS now %.0f MiB (anonymous %.0f, file %.0f)", res.Stats.RSSMiB, res.Stats.RSSAnonMiB, res.Stats.RSSFileMiB)
	return nil
}

// progress is the apps' state, for the log while waiting.
func (r *opRun) progress() string {
	c := r.e.track.counts()
	return fmt.Sprintf("%d apps, %d applied, %d ready", c.total, c.applied, c.ready)
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
	instance := client.MatchingLabels{render.LabelInstance: app.Name}
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

// createApps creates the N SimpleWebApps, o.workers in flight; it returns
// the error of a create that failed, if any.
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
