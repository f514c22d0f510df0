package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/guard"
	"example.com/simplewebapp-operator/internal/testkit"
)

// crdFile is the committed CRD: CRD N for the operator built from this tree.
const crdFile = "config/crd/bases/example.com_simplewebapps.yaml"

var (
	crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	swaGVK = webappv1.GroupVersion.WithKind("SimpleWebApp")
)

// TestOperatorOlderThanCRD is operator N−1 against CRD N: the installed CRD
// has a spec and a status field that the running operator's Go types lack
// (the committed CRD plus spec.futureField and status.futureStatus). Over
// three spec changes, each reconciled, neither field is lost: the operator
// sends no PUT of a SimpleWebApp (which would drop what its types do not
// know), and the generation moves only with the test's own changes.
func TestOperatorOlderThanCRD(t *testing.T) {
	changes := size(t, "spec changes", 3, 3)
	e := newEnv(t)
	ctx := t.Context()
	ns := testkit.Namespace(t, e.C, testkit.NS{Prefix: "skew-", WaitForServiceAccount: true})

	e.installCRD(func(v1 map[string]any) {
		e.properties(v1, "spec")["futureField"] = map[string]any{"type": "string"}
		e.properties(v1, "status")["futureStatus"] = map[string]any{"type": "string"}
	})
	// Until the API server serves the new schema it prunes the new field.
	testkit.WaitFor(t, 30*time.Second, "the API server keeping spec.futureField", func(ctx context.Context) (bool, string) {
		kept, err := e.dryRunKeeps(ctx, ns, "futureField", "probe")
		return kept, fmt.Sprintf("kept %v, %v", kept, err)
	}, testkit.Every(100*time.Millisecond))

	op := e.start("operator", e.id, nil, "--leader-elect=false")
	diag := testkit.Diag(func() string { return "--- operator log tail ---\n" + op.LogTail(30) })
	abort := testkit.Abort(func() error {
		if exited, err := op.Exited(); exited {
			return fmt.Errorf("the operator exited (%v):\n%s", err, op.LogTail(30))
		}
		return nil
	})

	const futureField, futureStatus = "set-by-a-user-of-crd-N", "written-by-operator-N"
	app := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": ns, "name": "app-0"},
		"spec":     map[string]any{"replicas": int64(1), "message": "v0", "futureField": futureField},
	}}
	app.SetGroupVersionKind(swaGVK)
	if err := e.C.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	// As a newer operator would record something of its own.
	st := app.DeepCopy()
	if err := e.C.Status().Patch(ctx, st, clientMergePatch(fmt.Sprintf(`{"status":{"futureStatus":%q}}`, futureStatus))); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(st.Object, "status", "futureStatus"); got != futureStatus {
		t.Fatalf("the status write kept status.futureStatus %q, want %q: the CRD is not served yet", got, futureStatus)
	}

	stable := testkit.ChannelVersion(t, "stable")
	generation := app.GetGeneration()
	// check reads the app: both fields kept, the generation the test's own.
	check := func(step string) {
		t.Helper()
		got := app.DeepCopy()
		if err := e.C.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			t.Fatal(err)
		}
		f, _, _ := unstructured.NestedString(got.Object, "spec", "futureField")
		s, _, _ := unstructured.NestedString(got.Object, "status", "futureStatus")
		if f != futureField || s != futureStatus || got.GetGeneration() != generation {
			t.Fatalf("%s: spec.futureField %q (want %q), status.futureStatus %q (want %q), generation %d (want %d); operator requests on it:\n%s",
				step, f, futureField, s, futureStatus, got.GetGeneration(), generation,
				testkit.FormatAudit(testkit.AuditFilter{User: e.id.User(), Resource: "simplewebapps"}.Filter(e.audit()), 60))
		}
	}
	t0 := time.Now()
	var slowest time.Duration
	for i := 0; i <= changes; i++ {
		step := "created"
		if i > 0 {
			step = fmt.Sprintf("spec change %d", i)
			p := app.DeepCopy()
			if err := e.C.Patch(ctx, p, clientMergePatch(fmt.Sprintf(`{"spec":{"message":"v%d"}}`, i))); err != nil {
				t.Fatal(err)
			}
			// +1: nobody else changed the spec since the last check.
			if p.GetGeneration() != generation+1 {
				t.Fatalf("%s: generation %d after the test's change, want %d", step, p.GetGeneration(), generation+1)
			}
			generation = p.GetGeneration()
		}
		start := time.Now()
		testkit.WaitFor(t, 2*time.Minute, step+": the SimpleWebApp Ready for its generation", func(ctx context.Context) (bool, string) {
			return converged(ctx, e.C, ns, stable)
		}, testkit.Every(100*time.Millisecond), diag, abort)
		slowest = max(slowest, time.Since(start))
		check(step)
	}

	ops := testkit.AuditFilter{User: e.id.User(), Resource: "simplewebapps"}.Filter(e.audit())
	var puts []testkit.AuditEvent
	for _, ev := range ops {
		if ev.Verb != "patch" {
			puts = append(puts, ev)
		}
	}
	t.Logf("FIGURE version skew, operator N−1 against CRD N (spec.futureField, status.futureStatus): %d spec changes in %.1f s (slowest reconcile %.1f s); both fields kept after each, generation %d = 1 + the test's changes; the operator's requests on SimpleWebApps: %v",
		changes, time.Since(t0).Seconds(), slowest.Seconds(), generation, testkit.CountBy(ops, testkit.AuditByObject))
	if len(puts) > 0 {
		t.Errorf("the operator sent %d writes of SimpleWebApps other than patches (a PUT drops the fields its types lack):\n%s", len(puts), testkit.FormatAudit(puts, 40))
	}
}

// TestOperatorNewerThanCRDRefusesToStart is operator N against CRD N−1 (the
// committed CRD without spec.suspend and status.appliedGeneration): the
// operator exits non-zero at start, naming the missing fields, having
// written nothing. With the release's CRD applied it starts and reconciles.
func TestOperatorNewerThanCRDRefusesToStart(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.installCRD(func(v1 map[string]any) {
		delete(e.properties(v1, "spec"), "suspend")
		delete(e.properties(v1, "status"), "appliedGeneration")
	})

	started := time.Now()
	op := e.start("operator-crd-n-1", e.id, nil, "--leader-elect=false")
	var exitedAfter time.Duration
	testkit.WaitFor(t, 30*time.Second, "the operator refusing the old CRD and exiting", func(context.Context) (bool, string) {
		exited, err := op.Exited()
		exitedAfter = time.Since(started)
		return exited, fmt.Sprint(err)
	}, testkit.Every(50*time.Millisecond), testkit.Diag(func() string { return op.LogTail(30) }))
	_, exitErr := op.Exited()
	msg := op.LogLinesWith("incompatible CRD", 3)
	var line struct{ Error string }
	if err := json.Unmarshal([]byte(msg), &line); err == nil && line.Error != "" {
		msg = line.Error // the message without the stack trace
	}
	// From its start: newEnv's kubectl auth can-i wrote with its credentials.
	writes := testkit.AuditFilter{User: e.id.User(), Verbs: testkit.WriteVerbs, From: started}.Filter(e.audit())
	if code := exitCode(exitErr); code <= 0 {
		t.Errorf("the operator exited with %v, want a non-zero exit status", exitErr)
	}
	for _, want := range []string{"spec.suspend", "status.appliedGeneration", "apply this release's CRD"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the operator's incompatible CRD message does not say %q:\n%s\nlog tail:\n%s", want, msg, op.LogTail(20))
		}
	}
	if len(writes) > 0 {
		t.Errorf("the operator wrote %d times before refusing to start:\n%s", len(writes), testkit.FormatAudit(writes, 40))
	}

	// The release's CRD applied, the same operator starts and reconciles.
	e.installCRD(nil)
	ns := testkit.Namespace(t, e.C, testkit.NS{Prefix: "skew-", WaitForServiceAccount: true})
	testkit.WaitFor(t, 30*time.Second, "the API server keeping spec.suspend", func(ctx context.Context) (bool, string) {
		kept, err := e.dryRunKeeps(ctx, ns, "suspend", true)
		return kept, fmt.Sprintf("kept %v, %v", kept, err)
	}, testkit.Every(100*time.Millisecond))
	restarted := time.Now()
	op2 := e.start("operator", e.id, nil, "--leader-elect=false")
	if err := op2.WaitReady(ctx, time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, op2.LogTail(30))
	}
	readyAfter := time.Since(restarted)
	names := e.createApps(ctx, ns, 1, webappv1.SimpleWebAppSpec{Message: "after the CRD upgrade"})
	testkit.WaitFor(t, 2*time.Minute, "the SimpleWebApp Ready", func(ctx context.Context) (bool, string) {
		ok, seen := converged(ctx, e.C, ns, testkit.ChannelVersion(t, "stable"))
		if !ok {
			return false, seen
		}
		// The restored status field is served and written again.
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(swaGVK)
		if err := e.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: names[0]}, u); err != nil {
			return false, err.Error()
		}
		applied, _, _ := unstructured.NestedInt64(u.Object, "status", "appliedGeneration")
		return applied == u.GetGeneration(), fmt.Sprintf("status.appliedGeneration %d, generation %d", applied, u.GetGeneration())
	}, testkit.Every(100*time.Millisecond), testkit.Diag(func() string { return op2.LogTail(30) }))
	t.Logf("FIGURE version skew, operator N against CRD N−1 (no spec.suspend, status.appliedGeneration): exited %.1f s after start (%v), %d writes; message %q; with the release's CRD: ready %.1f s after start, app Ready %.1f s after start",
		exitedAfter.Seconds(), exitErr, len(writes), msg, readyAfter.Seconds(), time.Since(restarted).Seconds())
}

// installCRD replaces the installed CRD's spec with the committed one, its
// v1 openAPIV3Schema changed by edit (nil: unchanged). A PUT, so that fields
// edit removes go too.
func (e *chaosEnv) installCRD(edit func(v1 map[string]any)) {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.Root, crdFile))
	if err != nil {
		e.t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(b, &file); err != nil {
		e.t.Fatalf("%s: %v", crdFile, err)
	}
	spec, _ := file["spec"].(map[string]any)
	if edit != nil {
		versions, _ := spec["versions"].([]any)
		edited := false
		for _, v := range versions {
			if vm, _ := v.(map[string]any); vm["name"] == webappv1.GroupVersion.Version {
				s, _, _ := unstructured.NestedFieldNoCopy(vm, "schema", "openAPIV3Schema")
				v1, ok := s.(map[string]any)
				if !ok {
					e.t.Fatalf("%s: no openAPIV3Schema for %s", crdFile, webappv1.GroupVersion.Version)
				}
				edit(v1)
				edited = true
			}
		}
		if !edited {
			e.t.Fatalf("%s: no version %s", crdFile, webappv1.GroupVersion.Version)
		}
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(crdGVK)
	if err := e.C.Get(e.t.Context(), client.ObjectKey{Name: guard.CRDName}, live); err != nil {
		e.t.Fatal(err)
	}
	live.Object["spec"] = spec
	if err := e.C.Update(e.t.Context(), live); err != nil {
		e.t.Fatalf("updating CRD %s: %v", guard.CRDName, err)
	}
}

// properties is the properties map of the top-level field of a CRD schema.
func (e *chaosEnv) properties(v1 map[string]any, field string) map[string]any {
	e.t.Helper()
	p, _, _ := unstructured.NestedFieldNoCopy(v1, "properties", field, "properties")
	m, ok := p.(map[string]any)
	if !ok {
		e.t.Fatalf("%s: no properties of %s", crdFile, field)
	}
	return m
}

// dryRunKeeps reports whether a dry-run create of a SimpleWebApp with
// spec.<field> = value keeps the field: whether the API server serves a
// schema with it (an unknown field is pruned).
func (e *chaosEnv) dryRunKeeps(ctx context.Context, ns, field string, value any) (bool, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": ns, "name": "schema-probe"},
		"spec":     map[string]any{field: value},
	}}
	u.SetGroupVersionKind(swaGVK)
	if err := e.C.Create(ctx, u, client.DryRunAll); err != nil {
		return false, err
	}
	_, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", field)
	return found, nil
}
