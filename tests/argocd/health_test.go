// Package argocd runs config/argocd/health.lua the way Argo CD runs a
// resource health script (gopher-lua, the object as the global table obj,
// the returned table's status and message) against SimpleWebApps captured
// from a real API server with the operator running (testdata/, rewritten by
// -update), and against a table of every status reason; and the resource
// actions of config/argocd/actions the way Argo CD runs those
// (actions_test.go).
package argocd

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

var update = flag.Bool("update", false, "capture testdata/ from a real API server with the operator running, and rewrite argocd-cm-patch.yaml from health.lua and actions/")

const (
	scriptPath = "../../config/argocd/health.lua"
	patchPath  = "../../config/argocd/argocd-cm-patch.yaml"
	// healthKey is the argocd-cm key of the script: resource.customizations.health.<group>_<kind>.
	healthKey = "resource.customizations.health.example.com_SimpleWebApp"
	// actionsKey is the argocd-cm key of the actions: resource.customizations.actions.<group>_<kind>.
	actionsKey = "resource.customizations.actions.example.com_SimpleWebApp"
)

// Health is what Argo CD reads from the script's result.
type Health struct {
	Status, Message string
}

// argoHealthStatuses are the codes Argo CD accepts from a script; any other
// becomes Unknown.
var argoHealthStatuses = []string{"Unknown", "Progressing", "Suspended", "Healthy", "Degraded", "Missing"}

func script(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(scriptPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// run runs a script as Argo CD's util/lua does for scripts from argocd-cm
// (health checks and actions alike): no standard libraries but package,
// base and table, and of os only time and date, through require("os") (no
// global os); obj set from the unstructured object (numbers as Lua numbers,
// lists as arrays). It returns the value left on the stack; the caller
// closes l.
func run(t *testing.T, name, src string, obj map[string]any) (l *lua.LState, ret lua.LValue) {
	t.Helper()
	l = lua.NewState(lua.Options{SkipOpenLibs: true})
	for lib, open := range map[string]lua.LGFunction{lua.LoadLibName: lua.OpenPackage, lua.BaseLibName: lua.OpenBase, lua.TabLibName: lua.OpenTable} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(open), NRet: 0, Protect: true}, lua.LString(lib)); err != nil {
			l.Close()
			t.Fatal(err)
		}
	}
	l.PreloadModule(lua.OsLibName, func(l *lua.LState) int {
		l.Push(l.SetFuncs(l.NewTable(), safeOs()))
		return 1
	})
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(src); err != nil {
		l.Close()
		t.Fatalf("%s: %v", name, err)
	}
	return l, l.Get(-1)
}

// safeOs is Argo CD's safe os library (util/lua/oslib_safe.go): time and
// date, copied from gopher-lua's, which these are.
func safeOs() map[string]lua.LGFunction {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	lua.OpenOs(l)
	full := l.GetGlobal(lua.OsLibName).(*lua.LTable)
	out := map[string]lua.LGFunction{}
	for _, name := range []string{"time", "date"} {
		out[name] = full.RawGetString(name).(*lua.LFunction).GFunction
	}
	return out
}

// health runs the health script, the value it returns decoded as {status,
// message}.
func health(t *testing.T, src string, obj map[string]any) Health {
	t.Helper()
	l, v := run(t, "health.lua", src, obj)
	defer l.Close()
	ret, ok := v.(*lua.LTable)
	if !ok {
		t.Fatalf("health.lua returned %s, not a table", v.Type())
	}
	h := Health{Status: lua.LVAsString(ret.RawGetString("status")), Message: lua.LVAsString(ret.RawGetString("message"))}
	if !slices.Contains(argoHealthStatuses, h.Status) {
		t.Fatalf("health.lua returned status %q, which Argo CD reads as Unknown", h.Status)
	}
	return h
}

func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, it := range v {
			arr.Append(toLua(l, it))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for k, it := range v {
			tbl.RawSetH(lua.LString(k), toLua(l, it))
		}
		return tbl
	}
	return lua.LNil
}

// The argocd-cm patch carries health.lua and the actions unchanged, under
// the keys Argo CD looks up for example.com/SimpleWebApp.
func TestPatchCarriesTheScripts(t *testing.T) {
	want, err := patchFor(script(t), actions(t))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(patchPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(patchPath)
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict(got, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Name != "argocd-cm" || cm.Data[healthKey] != script(t) {
		t.Errorf("%s: ConfigMap %s does not hold health.lua under %s (rewrite it with -update)", patchPath, cm.Metadata.Name, healthKey)
	}
	var acts actionsConfig
	if err := yaml.UnmarshalStrict([]byte(cm.Data[actionsKey]), &acts); err != nil {
		t.Fatalf("%s: %s: %v", patchPath, actionsKey, err)
	}
	if !reflect.DeepEqual(acts, actions(t)) {
		t.Errorf("%s: %s does not hold the scripts of config/argocd/actions (rewrite it with -update)", patchPath, actionsKey)
	}
}

func patchFor(health string, acts actionsConfig) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Installs config/argocd/health.lua and config/argocd/actions as Argo CD's health\n")
	b.WriteString("# check and resource actions of SimpleWebApps (generated from them:\n")
	b.WriteString("# go test ./tests/argocd -update). Merge into argocd-cm:\n")
	b.WriteString("#   kubectl -n argocd patch configmap argocd-cm --patch-file config/argocd/argocd-cm-patch.yaml\n")
	actsYAML, err := yaml.Marshal(acts)
	if err != nil {
		return nil, err
	}
	body, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "argocd-cm", "namespace": "argocd"},
		"data":     map[string]string{healthKey: health, actionsKey: string(actsYAML)},
	})
	b.Write(body)
	return b.Bytes(), err
}

// fixture is a SimpleWebApp captured from the API server and the health
// Argo CD must show for it.
type fixture struct {
	name, want string
}

// captured: each file in testdata/ is a SimpleWebApp as the API server
// returned it while the operator was running (capture_test.go writes them).
var captured = []fixture{
	{"available", "Healthy"},
	{"progressing", "Progressing"},
	{"suspended", "Suspended"},
	{"version-not-found", "Degraded"},
	{"patch-not-allowed", "Degraded"},
	{"object-not-owned", "Degraded"},
	{"rollout-failed", "Degraded"},
	{"rolled-back", "Degraded"},
}

func load(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatalf("%v (capture the fixtures with -update)", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil { // numbers become int64, as Argo CD's objects
		t.Fatal(err)
	}
	return u.Object
}

// kstatusOf is what Flux and kstatus-based waiters read from the object.
func kstatusOf(t *testing.T, obj map[string]any) kstatus.Status {
	t.Helper()
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// Argo CD and kstatus tell the same story: Healthy is Current, Degraded is
// Failed, Progressing is InProgress; Suspended is Current for kstatus while
// the running app is Ready (nothing is being done, on purpose), InProgress
// while it is not.
var kstatusOfHealth = map[string]kstatus.Status{
	"Healthy": kstatus.CurrentStatus, "Degraded": kstatus.FailedStatus,
	"Progressing": kstatus.InProgressStatus, "Suspended": kstatus.CurrentStatus,
}

func TestCapturedObjects(t *testing.T) {
	if *update {
		capture(t)
	}
	src := script(t)
	for _, f := range captured {
		t.Run(f.name, func(t *testing.T) {
			obj := load(t, f.name)
			h := health(t, src, obj)
			if h.Status != f.want {
				t.Errorf("health %s (%q), want %s", h.Status, h.Message, f.want)
			}
			if h.Message == "" {
				t.Error("no message")
			}
			if got := kstatusOf(t, obj); got != kstatusOfHealth[f.want] {
				t.Errorf("kstatus %s, want %s for Argo CD's %s", got, kstatusOfHealth[f.want], f.want)
			}
			t.Logf("%s: %s", h.Status, h.Message)
		})
	}
	// A new generation the operator has not processed yet: whatever the
	// conditions of the last one said, it is Progressing.
	for _, f := range captured {
		obj := load(t, f.name)
		meta := obj["metadata"].(map[string]any)
		meta["generation"] = meta["generation"].(int64) + 1
		if h := health(t, src, obj); h.Status != "Progressing" || !strings.Contains(h.Message, "generation") {
			t.Errorf("%s with a new generation: %s (%q), want Progressing", f.name, h.Status, h.Message)
		}
	}
}

// status builds a SimpleWebApp's status as the operator writes it for a
// phase (controllers/status.go, phaseOf): the three conditions carry the reason.
func status(gen, observed int64, reason, ready, reconciling, stalled string) map[string]any {
	cond := func(typ, st string) map[string]any {
		return map[string]any{"type": typ, "status": st, "reason": reason, "message": "a message for " + reason,
			"observedGeneration": gen, "lastTransitionTime": "2026-01-01T00:00:00Z"}
	}
	return map[string]any{
		"apiVersion": "example.com/v1", "kind": "SimpleWebApp",
		"metadata": map[string]any{"name": "x", "namespace": "demo", "generation": gen},
		"status": map[string]any{"observedGeneration": observed, "conditions": []any{
			cond(webappv1.ConditionReady, ready), cond(webappv1.ConditionReconciling, reconciling), cond(webappv1.ConditionStalled, stalled)}},
	}
}

// Every reason of api/v1/conditions.go maps to the health its class means:
// terminal (including RolloutFailed and RolledBack) Degraded, transient and
// rolling out Progressing, Suspended Suspended, Available Healthy.
func TestEveryReason(t *testing.T) {
	src := script(t)
	type row struct {
		name string
		obj  map[string]any
		want string
	}
	// Where kstatus' reading differs from kstatusOfHealth[want].
	kstatusExceptions := map[string]kstatus.Status{
		"Suspended (app not ready)": kstatus.InProgressStatus,
		// kstatus reads an object without status as Current; the operator
		// writes status on its first reconcile.
		"no status yet": kstatus.CurrentStatus,
	}
	var rows []row
	for _, r := range webappv1.AllReasons() {
		switch {
		case slices.Contains(webappv1.TerminalReasons, r):
			rows = append(rows, row{r, status(3, 3, r, "False", "False", "True"), "Degraded"})
		case slices.Contains(webappv1.TransientReasons, r):
			// A transient failure leaves observedGeneration behind.
			rows = append(rows, row{r, status(3, 2, r, "False", "True", "False"), "Progressing"},
				row{r + " (same generation)", status(3, 3, r, "False", "True", "False"), "Progressing"})
		case r == webappv1.ReasonSuspended:
			rows = append(rows, row{r + " (app ready)", status(3, 3, r, "True", "False", "False"), "Suspended"},
				row{r + " (app not ready)", status(3, 3, r, "False", "False", "False"), "Suspended"})
		case r == webappv1.ReasonAvailable:
			rows = append(rows, row{r, status(3, 3, r, "True", "False", "False"), "Healthy"})
		case r == webappv1.ReasonProgressing:
			rows = append(rows, row{r, status(3, 3, r, "False", "True", "False"), "Progressing"})
		default:
			t.Errorf("reason %s is in no class: add it to TerminalReasons or TransientReasons, and to this table", r)
		}
	}
	rows = append(rows,
		row{"no status yet", map[string]any{"apiVersion": "example.com/v1", "kind": "SimpleWebApp",
			"metadata": map[string]any{"name": "x", "namespace": "demo", "generation": int64(1)}}, "Progressing"},
		row{"generation not observed", status(4, 3, webappv1.ReasonAvailable, "True", "False", "False"), "Progressing"},
	)
	for _, r := range rows {
		h := health(t, src, r.obj)
		if h.Status != r.want {
			t.Errorf("%s: %s (%q), want %s", r.name, h.Status, h.Message, r.want)
		}
		want := kstatusOfHealth[r.want]
		if k, ok := kstatusExceptions[r.name]; ok {
			want = k
		}
		if got := kstatusOf(t, r.obj); got != want {
			t.Errorf("%s: kstatus %s, want %s", r.name, got, want)
		}
	}
	t.Logf("%d rows over %d reasons", len(rows), len(webappv1.AllReasons()))
}
