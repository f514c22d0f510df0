package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

// The channel the apps follow, as a --channels-dir file: first at from, then
// moved to to.
const channelName = "rapid"

// fromVersion and toVersion are the two newest package versions: no version
// is named here, so a new version or a promotion changes nothing in the bench.
var fromVersion, toVersion = moveVersions()

func moveVersions() (string, string) {
	vs := testkit.Versions(testkit.Main)
	if len(vs) < 2 {
		return vs[0], vs[0]
	}
	return vs[len(vs)-2], vs[len(vs)-1]
}

// writeChannel writes the channel file channelName into dir, atomically (the
// operator never reads half a file).
func writeChannel(dir string, versions ...string) error {
	return testkit.DirTree(dir).Write(map[string]string{channelName: testkit.ChannelYAML(versions...)})
}

func newApp(i int, o opts) *webappv1.SimpleWebApp {
	return &webappv1.SimpleWebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsName(i % o.namespaces), Name: fmt.Sprintf("app-%d", i)},
		Spec:       webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Channel: channelName},
	}
}

type bareResult struct {
	// RenderSeconds: rendering every app before the clock starts (the
	// operator renders within its time).
	RenderSeconds float64 `json:"renderSeconds"`
	// AppliedSeconds: from the first create to the last object applied
	// (create the SimpleWebApp, then apply its objects, workers in
	// parallel).
	AppliedSeconds   float64   `json:"appliedSeconds"`
	AppliedQuartiles []float64 `json:"appliedQuartiles"` // as the operator's
	ReadySeconds     float64   `json:"readySeconds"`
	Objects          int       `json:"objects"`
	Requests         requests  `json:"requests"`
	// ControlPlaneCPU: CPU seconds per control-plane process until applied.
	ControlPlaneCPU map[string]float64 `json:"controlPlaneCPUSecondsToApplied"`
}

// runBare creates the SimpleWebApps (no operator runs) and server-side-applies
// the operator's own render of each, as its field manager would, with
// o.workers requests in flight.
func runBare(ctx context.Context, dir, root string, o opts) (*bareResult, error) {
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
	chans := render.Channels{FS: channels.FS, Dir: os.DirFS(cdir)}

	spec, err := defaultedSpec(ctx, e.C, o)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	apps, rendered, err := renderApps(ctx, chans, spec, o)
	if err != nil {
		return nil, err
	}
	res := &bareResult{RenderSeconds: time.Since(t0).Seconds(), Objects: o.n * len(rendered[0].Objects)}
	logf("  rendered %d apps in %.1fs (before the clock)", o.n, res.RenderSeconds)

	c, dyn, err := bareClients(e)
	if err != nil {
		return nil, err
	}
	if o.pprof {
		// The API server's side, to compare with the operator run's.
		go func() {
			if err := apiServerCPUProfile(e.Cluster, filepath.Join(o.out, fmt.Sprintf("apiserver-cpu-bare-n%d-ns%d.pb.gz", o.n, o.namespaces)), 20*time.Second); err != nil {
				logf("  kube-apiserver CPU profile: %v", err)
			}
		}()
	}
	mark := e.audit.mark()
	cp0 := controlPlaneCPU(e.Cluster)
	t0 = time.Now()
	quartiles := newQuartiles(o.n, t0)
	if err := applyApps(ctx, c, dyn, apps, rendered, o.workers, quartiles); err != nil {
		return nil, err
	}
	res.AppliedSeconds = time.Since(t0).Seconds()
	res.AppliedQuartiles = quartiles.seconds()
	res.ControlPlaneCPU = cpuSince(e.Cluster, cp0)
	logf("  created and applied in %.1fs", res.AppliedSeconds)
	d, ok := waitUntil(30*time.Minute, func() bool { return e.track.readyDeployments() >= o.n },
		func() string { return fmt.Sprintf("%d/%d Deployments ready", e.track.readyDeployments(), o.n) })
	if !ok {
		return nil, errors.New("the Deployments did not become ready")
	}
	res.ReadySeconds = res.AppliedSeconds + d.Seconds()
	logf("  all Ready after %.1fs", res.ReadySeconds)
	e.audit.waitQuiet(bareUser, o.quiet, time.Minute)
	res.Requests = summarise(e.audit.since(mark, bareUser), false)
	return res, nil
}

// defaultedSpec is an app's spec as the API server defaults it (a dry-run
// create), for the render: the operator renders what it reads back.
func defaultedSpec(ctx context.Context, c client.Client, o opts) (webappv1.SimpleWebAppSpec, error) {
	probe := newApp(0, o)
	if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
		return webappv1.SimpleWebAppSpec{}, fmt.Errorf("dry-run create: %w", err)
	}
	return probe.Spec, nil
}

// renderApps makes the N apps with spec and renders each with the
// operator's render of its channel's release.
func renderApps(ctx context.Context, chans render.Channels, spec webappv1.SimpleWebAppSpec, o opts) ([]*webappv1.SimpleWebApp, []*render.Rendered, error) {
	rendered := make([]*render.Rendered, o.n)
	apps := make([]*webappv1.SimpleWebApp, o.n)
	for i := range o.n {
		apps[i] = newApp(i, o)
		apps[i].Spec = *spec.DeepCopy()
		rel, err := chans.Resolve(ctx, apps[i].Spec)
		if err != nil {
			return nil, nil, err
		}
		if rendered[i], err = render.Render(rel, apps[i]); err != nil {
			return nil, nil, err
		}
	}
	return apps, rendered, nil
}

// bareClients are the bare client's identity's: a typed client for the
// creates and the REST mapping, a dynamic one for the applies.
func bareClients(e *env) (client.Client, dynamic.Interface, error) {
	cfg, err := restConfig(e.bareID.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: e.scheme})
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return c, dyn, nil
}

// applyApps runs bareApply for every app, workers in flight, and stops at
// the first error; quartiles observes the apps done.
func applyApps(ctx context.Context, c client.Client, dyn dynamic.Interface, apps []*webappv1.SimpleWebApp, rendered []*render.Rendered, workers int, quartiles *quartiles) error {
	var done atomic.Int64
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := bareApply(ctx, c, dyn, apps[i], rendered[i]); err != nil {
					errs <- err
					return
				}
				quartiles.observe(int(done.Add(1)))
			}
		}()
	}
	for i := range apps {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return err
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return nil
}

// bareApply creates swa and applies its render.
func bareApply(ctx context.Context, c client.Client, dyn dynamic.Interface, swa *webappv1.SimpleWebApp, r *render.Rendered) error {
	swa = swa.DeepCopy()
	if err := c.Create(ctx, swa); err != nil {
		return err
	}
	for _, obj := range apply.DesiredObjects(swa, r) {
		gvk := obj.GroupVersionKind()
		m, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		raw, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := dyn.Resource(m.Resource).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.ApplyPatchType, raw,
			metav1.PatchOptions{FieldManager: render.ManagerName, Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
	return nil
}

func execOut(dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}
