// Package chaos injects faults into a running operator and judges the result
// from the API server's audit log (internal/localcluster Options.AuditLog), not from
// the operator's own logs: crashes at random writes, a field fight with
// another manager, a leader paused past its Lease, an operator one version
// apart from the installed CRD.
//
// Each test starts its own full local cluster. Sizes: SWA_CHAOS_FULL=1 (make
// chaos) runs the sizes of issue 13; otherwise a reduced size that fits CI.
// Every test logs the size it ran (SIZE) and its measured figures (FIGURE).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

// full reports whether the full sizes run (SWA_CHAOS_FULL=1, make chaos).
func full() bool { return os.Getenv("SWA_CHAOS_FULL") == "1" }

// size picks the CI or the full value of a size and says which ran.
func size(t *testing.T, what string, ci, fullSize int) int {
	t.Helper()
	n, mode := ci, "reduced (CI; SWA_CHAOS_FULL=1 for full)"
	if full() {
		n, mode = fullSize, "full"
	}
	t.Logf("SIZE %s = %d (%s size; full size %d)", what, n, mode, fullSize)
	return n
}

// chaosEnv is one fresh full cluster with an audit log, the CRD and the
// operator's identity.
type chaosEnv struct {
	*operatortest.Env
	t   *testing.T
	bin string
	id  *operatortest.Identity // the operator's ServiceAccount (leader election bound too)
}

// newEnv starts a fresh cluster for one test; everything stops at its end.
func newEnv(t *testing.T) *chaosEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	oe, err := operatortest.Setup(ctx, operatortest.Options{Name: "chaos", AuditLog: true, BuildTags: []string{"failpoints"}}, t.Cleanup)
	if err != nil {
		t.Fatal(err)
	}
	e := &chaosEnv{Env: oe, t: t}
	if e.id, err = e.SetUpOperatorIdentity(ctx, operatortest.OperatorRBAC{ClusterRoleBinding: "chaos-manager", LeaderElection: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.Kubectl.WaitCanI(ctx, time.Minute, operatortest.CanIWant{
		Kubeconfig: e.id.Kubeconfig, Args: []string{"watch", "simplewebapps.example.com", "--all-namespaces"}, Want: "yes",
	}); err != nil {
		t.Fatal(err)
	}
	if e.bin, err = e.OperatorBin(); err != nil {
		t.Fatal(err)
	}
	t.Logf("fresh cluster with audit log %s ready in %s", e.Cluster.AuditLogPath(), time.Since(t0).Round(time.Millisecond))
	return e
}

// start runs an operator process as id with the given environment and
// flags; it is killed at the end of the test.
func (e *chaosEnv) start(name string, id *operatortest.Identity, environ []string, args ...string) *operatortest.Operator {
	e.t.Helper()
	op, err := operatortest.Start(operatortest.Config{
		Name:         name,
		Bin:          e.bin,
		Kubeconfig:   id.Kubeconfig,
		LogPath:      filepath.Join(e.Dir, name+".log"),
		OutOfCluster: true,
		Env:          environ,
		Args:         append([]string{"--metrics-bind-address=0"}, args...),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(op.Kill)
	return op
}

// audit reads the audit log so far.
func (e *chaosEnv) audit() []testkit.AuditEvent {
	e.t.Helper()
	events, err := testkit.ReadAudit(e.Cluster.AuditLogPath())
	if err != nil {
		e.t.Fatal(err)
	}
	return events
}

// exitCode is the exit status of an exited process (-1: killed by a signal
// or unknown).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// createApps creates n SimpleWebApps app-0 ... in ns with spec.
func (e *chaosEnv) createApps(ctx context.Context, ns string, n int, spec webappv1.SimpleWebAppSpec) []string {
	e.t.Helper()
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("app-%d", i)
		swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]}, Spec: *spec.DeepCopy()}
		if err := e.C.Create(ctx, swa); err != nil {
			e.t.Fatal(err)
		}
	}
	return names
}

// patchAll merge-patches every SimpleWebApp of names.
func (e *chaosEnv) patchAll(ctx context.Context, ns string, names []string, patch string) {
	e.t.Helper()
	for _, n := range names {
		swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
		if err := e.C.Patch(ctx, swa, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
			e.t.Fatalf("patch %s on %s: %v", patch, n, err)
		}
	}
}

// converged says whether every SimpleWebApp in ns is Ready on version for
// its current generation, with an inventory that is exactly its render
// (pruning done); it describes the first that is not.
func converged(ctx context.Context, c client.Client, ns, version string) (bool, string) {
	var list webappv1.SimpleWebAppList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return false, err.Error()
	}
	notYet := 0
	first := ""
	for i := range list.Items {
		swa := &list.Items[i]
		ready := apimeta.FindStatusCondition(swa.Status.Conditions, webappv1.ConditionReady)
		why := ""
		switch {
		case ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != swa.Generation:
			why = fmt.Sprintf("Ready %v", ready)
		case swa.Status.ObservedGeneration != swa.Generation:
			why = fmt.Sprintf("observedGeneration %d of %d", swa.Status.ObservedGeneration, swa.Generation)
		case swa.Status.Version != version:
			why = "version " + swa.Status.Version
		default:
			if desired, err := desiredNow(ctx, swa); err != nil {
				why = err.Error()
			} else if len(desired) != len(swa.Status.Inventory) {
				why = fmt.Sprintf("inventory %v, render has %d objects (not pruned yet)", swa.Status.Inventory, len(desired))
			}
		}
		if why != "" {
			notYet++
			if first == "" {
				first = swa.Name + ": " + why
			}
		}
	}
	return notYet == 0 && len(list.Items) > 0, fmt.Sprintf("%d of %d not converged on %s; first: %s", notYet, len(list.Items), version, first)
}

// desiredNow is what the operator would write for swa now: a fresh resolve and
// render of the embedded channels, as `kubectl swa render` does.
func desiredNow(ctx context.Context, swa *webappv1.SimpleWebApp) ([]*unstructured.Unstructured, error) {
	src := render.Channels{FS: channels.FS}
	rel, err := src.Resolve(ctx, swa.Spec)
	if err != nil {
		return nil, err
	}
	r, err := render.Render(rel, swa)
	if err != nil {
		return nil, err
	}
	return apply.DesiredObjects(swa, r), nil
}

// subset reports the first field of want that live lacks or holds otherwise
// ("" when live holds all of want). Lists compare element by element;
// numbers by value.
func subset(live, want any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		l, _ := live.(map[string]any)
		for k, wv := range w {
			if d := subset(l[k], wv, path+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		l, _ := live.([]any)
		if len(l) != len(w) {
			return fmt.Sprintf("%s: %d items, want %d", path, len(l), len(w))
		}
		for i := range w {
			if d := subset(l[i], w[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	case nil:
		return ""
	}
	if fmt.Sprint(live) != fmt.Sprint(want) {
		return fmt.Sprintf("%s: %v, want %v", path, live, want)
	}
	return ""
}

// orphans lists the objects of the managed kinds in ns that carry a
// SimpleWebApp's instance label but that no SimpleWebApp's inventory lists.
func orphans(ctx context.Context, c client.Client, ns string) ([]string, int, error) {
	var list webappv1.SimpleWebAppList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, 0, err
	}
	listed := map[string]bool{}
	for _, swa := range list.Items {
		for _, ref := range swa.Status.Inventory {
			listed[ref.Kind+"/"+ref.Name] = true
		}
	}
	var out []string
	total := 0
	for _, k := range render.ManagedKinds {
		u := &unstructured.UnstructuredList{}
		u.SetGroupVersionKind(k.GVK.GroupVersion().WithKind(k.GVK.Kind + "List"))
		if err := c.List(ctx, u, client.InNamespace(ns), client.HasLabels{render.LabelInstance}); err != nil {
			return nil, 0, err
		}
		for _, o := range u.Items {
			total++
			if !listed[k.GVK.Kind+"/"+o.GetName()] {
				out = append(out, fmt.Sprintf("%s/%s (instance %s)", k.GVK.Kind, o.GetName(), o.GetLabels()[render.LabelInstance]))
			}
		}
	}
	return out, total, nil
}

// operatorEvents describes the events that the operator reported about uid
// and counts those of type typ and reason.
func operatorEvents(ctx context.Context, c client.Client, ns string, uid string, typ, reason string) (int, string, error) {
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0, "", err
	}
	n := 0
	var seen []string
	for _, ev := range list.Items {
		if string(ev.InvolvedObject.UID) != uid {
			continue
		}
		seen = append(seen, fmt.Sprintf("%s %s: %s", ev.Type, ev.Reason, ev.Message))
		if ev.Type == typ && ev.Reason == reason {
			n++
		}
	}
	return n, strings.Join(seen, "\n"), nil
}

// clientMergePatch is a JSON merge patch.
func clientMergePatch(patch string) client.Patch {
	return client.RawPatch("application/merge-patch+json", []byte(patch))
}
