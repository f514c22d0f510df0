package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// describeChannels lists the files of the channels directory with the
// content of the channel files, for failures.
func describeChannels() string {
	var b strings.Builder
	b.WriteString("--- channels directory " + env.channelsDir + " ---\n")
	_ = filepath.WalkDir(env.channelsDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(env.channelsDir, p)
		fmt.Fprintf(&b, "%s\n", rel)
		if !strings.Contains(rel, string(filepath.Separator)) {
			content, _ := os.ReadFile(p)
			fmt.Fprintf(&b, "  | %s\n", strings.ReplaceAll(strings.TrimRight(string(content), "\n"), "\n", "\n  | "))
		}
		return nil
	})
	return b.String()
}

// diagFor is the failure report of a test in ns: kubectl's view, the
// operator's log lines about ns (tests run in parallel; the plain log tail
// mixes them), and the channels directory.
func diagFor(ns string) func() string {
	return func() string {
		return describeNamespace(ns) +
			fmt.Sprintf("--- operator log lines mentioning %s ---\n%s\n", ns, env.op.LogLinesWith(`"`+ns+`"`, 30)) +
			describeChannels()
	}
}

// createApp creates the SimpleWebApp name in ns with spec.
func createApp(t *testing.T, ctx context.Context, ns, name string, spec webappv1.SimpleWebAppSpec) {
	t.Helper()
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := env.C.Create(ctx, swa); err != nil {
		t.Fatal(err)
	}
}

// patchApp applies a JSON merge patch to the spec of the SimpleWebApp.
func patchApp(t *testing.T, ctx context.Context, ns, name, patch string) {
	t.Helper()
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.C.Patch(ctx, swa, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("merge patch %s on %s/%s: %v", patch, ns, name, err)
	}
}

// pokeDeployment sets a label on the Deployment: no change of its spec or
// annotations, so its generation stays (an annotation would bump it), but the
// operator watches the Deployments it owns and reconciles the SimpleWebApp.
func pokeDeployment(ctx context.Context, ns, name string, n int) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := fmt.Sprintf(`{"metadata":{"labels":{"e2e.simplewebapp.example.com/poke":"%d"}}}`, n)
	return env.C.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// waitSettled waits until the SimpleWebApp name (Deployment name-web) in ns
// is settled on version with n pods, and returns that observation.
func waitSettled(t *testing.T, ns, name string, n int32, version string, diag func() string) *app {
	t.Helper()
	var settled *app
	testkit.WaitFor(t, timeout, fmt.Sprintf("%s settled: Ready on version %s with %d Ready pods of the newest template", name, version, n),
		func(ctx context.Context) (bool, string) {
			a, err := observe(ctx, ns, name, name+"-web")
			if err != nil {
				return false, err.Error()
			}
			settled = a
			return a.settledOn(n, version)
		}, env.waitOpts(diag))
	return settled
}

// condition returns the condition typ of the SimpleWebApp, or a zero one.
func condition(swa *webappv1.SimpleWebApp, typ string) metav1.Condition {
	if c := apimeta.FindStatusCondition(swa.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{Type: typ, Status: "Unknown(absent)"}
}

// operatorEvents counts the events the operator reported about the object
// uid with type typ and reason; a series counts as often as it happened. It
// also describes every operator event about the object.
func operatorEvents(ctx context.Context, ns string, uid types.UID, typ, reason string) (int, string, error) {
	var list eventsv1.EventList
	if err := env.C.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0, "", err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp) })
	n := 0
	var seen []string
	for _, ev := range list.Items {
		if ev.Regarding.UID != uid || ev.ReportingController != "simplewebapp-operator" {
			continue
		}
		count := int32(1)
		if ev.Series != nil && ev.Series.Count > 1 {
			count = ev.Series.Count
		}
		seen = append(seen, fmt.Sprintf("%s %s x%d: %s", ev.Type, ev.Reason, count, ev.Note))
		if ev.Type == typ && ev.Reason == reason {
			n += int(count)
		}
	}
	return n, fmt.Sprintf("%d %s %s events; operator events about the object:\n  %s", n, typ, reason, strings.Join(seen, "\n  ")), nil
}

// waitEvents waits until there are at least atLeast events of typ and reason
// from the operator about the object uid, and returns how many there are.
func waitEvents(t *testing.T, ns string, uid types.UID, typ, reason string, atLeast int, diag func() string) int {
	t.Helper()
	var n int
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("at least %d %s events %s from the operator", atLeast, typ, reason),
		func(ctx context.Context) (bool, string) {
			var seen string
			var err error
			n, seen, err = operatorEvents(ctx, ns, uid, typ, reason)
			if err != nil {
				return false, err.Error()
			}
			return n >= atLeast, seen
		}, env.waitOpts(diag))
	return n
}

// sampler calls probe every interval in its own goroutine until stop. The
// probe's results are safe to read after stop returns.
type sampler struct {
	quit, done chan struct{}
	n          int
}

func startSampler(ctx context.Context, every time.Duration, probe func(ctx context.Context)) *sampler {
	s := &sampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			probe(ctx)
			s.n++
			select {
			case <-s.quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop stops sampling after a last sample and returns the number of samples.
func (s *sampler) stop() int {
	close(s.quit)
	<-s.done
	return s.n
}

// readyHonesty checks, sample by sample, that a SimpleWebApp never says
// Ready=True while its Deployment is not fully rolled out: the Deployment
// controller has observed the newest generation, and every desired pod is
// updated and available with no old pod left. Each sample reads the
// Deployment, the SimpleWebApp, and the Deployment again. Ready=True is a
// violation when the Deployment was not rolled out at either read; when it
// was at one read and not at the other, it changed while the SimpleWebApp was
// read and the sample is inconclusive.
//
// This includes the moment a channel moves the SimpleWebApp to another
// version without a new generation: the operator marks it not Ready before it
// applies the new version, so Ready=True never describes the previous one.
type readyHonesty struct {
	ns, name, dep string

	samples, readErrors, readyTrue, readyNotTrue, inconclusive int
	violations                                                 []string
}

func (h *readyHonesty) sample(ctx context.Context) {
	h.samples++
	var d1, d2 appsv1.Deployment
	var swa webappv1.SimpleWebApp
	if env.C.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: h.dep}, &d1) != nil ||
		env.C.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: h.name}, &swa) != nil ||
		env.C.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: h.dep}, &d2) != nil {
		h.readErrors++
		return
	}
	now := time.Now()
	ready := condition(&swa, webappv1.ConditionReady)
	if ready.Status != metav1.ConditionTrue {
		h.readyNotTrue++
		return
	}
	h.readyTrue++
	done1, why1 := testkit.DeploymentRolledOut(&d1)
	done2, why2 := testkit.DeploymentRolledOut(&d2)
	if done1 || done2 {
		if !done1 || !done2 {
			h.inconclusive++
		}
		return
	}
	seen := fmt.Sprintf("%s: Ready=True (%s: %s; SimpleWebApp resourceVersion %s, status.version %s) while the Deployment was not rolled out: "+
		"before (resourceVersion %s): %s; after (resourceVersion %s): %s",
		now.Format("15:04:05.000"), ready.Reason, ready.Message, swa.ResourceVersion, swa.Status.Version,
		d1.ResourceVersion, why1, d2.ResourceVersion, why2)
	h.violations = append(h.violations, seen)
}

func (h *readyHonesty) String() string {
	return fmt.Sprintf("%d samples (%d failed reads): Ready=True in %d (%d of them inconclusive, %d violations), not True in %d",
		h.samples, h.readErrors, h.readyTrue, h.inconclusive, len(h.violations), h.readyNotTrue)
}

// check fails the test if any sample saw Ready=True during a roll-out.
func (h *readyHonesty) check(t *testing.T) {
	t.Helper()
	t.Logf("Ready honesty of %s: %s", h.name, h)
	if len(h.violations) > 0 {
		t.Errorf("%s said Ready=True while its Deployment was not rolled out, in %d samples:\n%s",
			h.name, len(h.violations), strings.Join(h.violations, "\n"))
	}
}
