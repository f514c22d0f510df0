package argocd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// actionsDir holds the actions as Argo CD lays out its own
// (resource_customizations/<group>/<Kind>/actions): discovery.lua and
// <name>/action.lua.
const actionsDir = "../../config/argocd/actions"

// actionNames are the actions, in the order of the argocd-cm definitions.
var actionNames = []string{"suspend", "resume", "reconcile-now"}

// actionsConfig is the argocd-cm value under actionsKey, as Argo CD's
// ResourceActions reads it.
type actionsConfig struct {
	Discovery   string             `json:"discovery.lua"`
	Definitions []actionDefinition `json:"definitions"`
}

type actionDefinition struct {
	Name   string `json:"name"`
	Action string `json:"action.lua"`
}

// actions reads actionsDir, failing if it holds an action actionNames lacks
// (which the argocd-cm patch would leave out).
func actions(t *testing.T) actionsConfig {
	t.Helper()
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(actionsDir, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	entries, err := os.ReadDir(actionsDir)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	if want := slices.Sorted(slices.Values(actionNames)); !slices.Equal(dirs, want) {
		t.Fatalf("%s holds the actions %v, actionNames lists %v", actionsDir, dirs, want)
	}
	cfg := actionsConfig{Discovery: read("discovery.lua")}
	for _, name := range actionNames {
		cfg.Definitions = append(cfg.Definitions, actionDefinition{Name: name, Action: read(filepath.Join(name, "action.lua"))})
	}
	return cfg
}

func (c actionsConfig) script(t *testing.T, name string) string {
	t.Helper()
	for _, d := range c.Definitions {
		if d.Name == name {
			return d.Action
		}
	}
	t.Fatalf("no action %s", name)
	return ""
}

// resourceAction is what Argo CD reads of one entry of discovery.lua's
// table (appv1.ResourceAction).
type resourceAction struct {
	Disabled    bool   `json:"disabled,omitempty"`
	IconClass   string `json:"iconClass,omitempty"`
	DisplayName string `json:"displayName,omitempty"`
}

// discover runs discovery.lua as Argo CD's ExecuteResourceActionDiscovery
// does: the table is encoded to JSON, each key an action, an empty entry an
// enabled one.
func discover(t *testing.T, cfg actionsConfig, obj map[string]any) map[string]resourceAction {
	t.Helper()
	l, v := run(t, "discovery.lua", cfg.Discovery, obj)
	defer l.Close()
	if v.Type() != lua.LTTable {
		t.Fatalf("discovery.lua returned %s, not a table", v.Type())
	}
	decoded, err := fromLua(v)
	if err != nil {
		t.Fatalf("discovery.lua: %v", err)
	}
	out := map[string]resourceAction{}
	if list, ok := decoded.([]any); ok && len(list) == 0 {
		return out // no action at all
	}
	table, ok := decoded.(map[string]any)
	if !ok {
		t.Fatalf("discovery.lua returned %v, not a table of actions", decoded)
	}
	for name, entry := range table {
		var a resourceAction
		if m, ok := entry.(map[string]any); ok {
			b, _ := json.Marshal(m)
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatalf("discovery.lua, action %s: %v", name, err)
			}
		}
		out[name] = a
	}
	return out
}

// act runs an action.lua as Argo CD's ExecuteResourceAction does for an
// action that returns the object (the old-style output, a patch of the
// object): encoded to JSON, decoded as an unstructured object, empty tables
// where the object had maps made maps again (cleanReturnedObj).
func act(t *testing.T, cfg actionsConfig, name string, obj map[string]any) map[string]any {
	t.Helper()
	l, v := run(t, name+"/action.lua", cfg.script(t, name), obj)
	defer l.Close()
	decoded, err := fromLua(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if _, ok := decoded.(map[string]any); !ok {
		t.Fatalf("%s returned %v, not an object", name, decoded)
	}
	b, err := json.Marshal(decoded)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		t.Fatalf("%s returned no Kubernetes object: %v", name, err)
	}
	return cleanReturned(u.Object, obj)
}

// fromLua converts a Lua value as Argo CD's JSON encoding of it
// (layeh.com/gopher-json) does: an empty table is an empty array, a table
// with keys 1..n an array, one with string keys an object; anything else is
// an error.
func fromLua(v lua.LValue) (any, error) {
	switch v := v.(type) {
	case *lua.LNilType:
		return nil, nil
	case lua.LBool:
		return bool(v), nil
	case lua.LNumber:
		return float64(v), nil
	case lua.LString:
		return string(v), nil
	case *lua.LTable:
		key, value := v.Next(lua.LNil)
		switch key.Type() {
		case lua.LTNil:
			return []any{}, nil
		case lua.LTNumber:
			var arr []any
			for want := lua.LNumber(1); key != lua.LNil; want++ {
				if key != want {
					return nil, fmt.Errorf("table is a sparse array or mixes keys (key %v)", key)
				}
				e, err := fromLua(value)
				if err != nil {
					return nil, err
				}
				arr = append(arr, e)
				key, value = v.Next(key)
			}
			return arr, nil
		case lua.LTString:
			obj := map[string]any{}
			for key != lua.LNil {
				k, ok := key.(lua.LString)
				if !ok {
					return nil, fmt.Errorf("table mixes keys (key %v)", key)
				}
				e, err := fromLua(value)
				if err != nil {
					return nil, err
				}
				obj[string(k)] = e
				key, value = v.Next(key)
			}
			return obj, nil
		}
	}
	return nil, fmt.Errorf("cannot encode a Lua %s", v.Type())
}

// cleanReturned is Argo CD's cleanReturnedObj: an empty array where the
// original held a map is made an empty map again.
func cleanReturned(out, orig map[string]any) map[string]any {
	for k, ov := range orig {
		switch nv := out[k].(type) {
		case map[string]any:
			if om, ok := ov.(map[string]any); ok {
				out[k] = cleanReturned(nv, om)
			}
		case []any:
			switch o := ov.(type) {
			case map[string]any:
				if len(nv) == 0 {
					out[k] = map[string]any{}
				}
			case []any:
				for i := range min(len(nv), len(o)) {
					nm, ok1 := nv[i].(map[string]any)
					om, ok2 := o[i].(map[string]any)
					if ok1 && ok2 {
						nv[i] = cleanReturned(nm, om)
					}
				}
			}
		}
	}
	return out
}

// offered: the actions discovery enables and disables for a SimpleWebApp,
// suspended or not.
func offered(suspended bool) map[string]resourceAction {
	return map[string]resourceAction{
		"suspend":       {Disabled: suspended},
		"resume":        {Disabled: !suspended},
		"reconcile-now": {},
	}
}

// Discovery offers suspend while the SimpleWebApp is not suspended, resume
// while it is, and reconcile-now always, on every captured object.
func TestDiscovery(t *testing.T) {
	cfg := actions(t)
	type row struct {
		name      string
		obj       map[string]any
		suspended bool
	}
	var rows []row
	for _, f := range captured {
		obj := load(t, f.name)
		suspended, _, _ := unstructured.NestedBool(obj, "spec", "suspend")
		rows = append(rows, row{f.name, obj, suspended})
	}
	if !slices.ContainsFunc(rows, func(r row) bool { return r.suspended }) {
		t.Fatal("no captured object is suspended")
	}
	explicit := load(t, "available")
	if err := unstructured.SetNestedField(explicit, false, "spec", "suspend"); err != nil {
		t.Fatal(err)
	}
	rows = append(rows, row{"spec.suspend: false", explicit, false})
	for _, r := range rows {
		if got, want := discover(t, cfg, r.obj), offered(r.suspended); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", r.name, got, want)
		}
	}
}

// argoTime is what os.date("!%Y-%m-%dT%XZ") writes: RFC 3339, UTC, seconds.
var argoTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

// Each action returns the object it was given with exactly its change: spec
// and metadata as they were otherwise, status untouched (Argo CD would patch
// it too).
func TestActions(t *testing.T) {
	cfg := actions(t)
	// An older request of Flux's (as Flux writes it), to show that
	// reconcile-now's is the one the operator reads.
	fluxEarlier := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	withoutAnnotations := func(obj map[string]any) { unstructured.RemoveNestedField(obj, "metadata", "annotations") }
	withFluxRequest := func(obj map[string]any) {
		_ = unstructured.SetNestedField(obj, fluxEarlier, "metadata", "annotations", webappv1.AnnotationFluxReconcileRequestedAt)
	}
	setSuspend := func(v bool) func(map[string]any) {
		return func(obj map[string]any) { _ = unstructured.SetNestedField(obj, v, "spec", "suspend") }
	}
	for _, tc := range []struct {
		name, action, fixture string
		prepare               func(map[string]any)
		// change is what the action does to the object, given the
		// returned object (for the time it wrote).
		change func(t *testing.T, want, got map[string]any)
	}{
		{name: "suspend a running app", action: "suspend", fixture: "available",
			change: func(_ *testing.T, want, _ map[string]any) { setSuspend(true)(want) }},
		{name: "suspend a failed app", action: "suspend", fixture: "version-not-found",
			change: func(_ *testing.T, want, _ map[string]any) { setSuspend(true)(want) }},
		{name: "resume", action: "resume", fixture: "suspended",
			change: func(_ *testing.T, want, _ map[string]any) { setSuspend(false)(want) }},
		{name: "reconcile-now", action: "reconcile-now", fixture: "available", change: requestedNow},
		{name: "reconcile-now without annotations", action: "reconcile-now", fixture: "available", prepare: withoutAnnotations, change: requestedNow},
		{name: "reconcile-now while suspended", action: "reconcile-now", fixture: "suspended", change: requestedNow},
		{name: "reconcile-now after Flux's request", action: "reconcile-now", fixture: "progressing", prepare: withFluxRequest, change: requestedNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := load(t, tc.fixture)
			if tc.prepare != nil {
				tc.prepare(obj)
			}
			want := load(t, tc.fixture)
			if tc.prepare != nil {
				tc.prepare(want)
			}
			got := act(t, cfg, tc.action, obj)
			tc.change(t, want, got)
			if !reflect.DeepEqual(got, want) {
				g, _ := json.MarshalIndent(got, "", "  ")
				w, _ := json.MarshalIndent(want, "", "  ")
				t.Errorf("%s returned\n%s\nwant\n%s", tc.action, g, w)
			}
		})
	}
}

// requestedNow checks the reconcile request reconcile-now wrote (the current
// time, in the form Argo CD writes times, the request the operator reads)
// and adds it to want.
func requestedNow(t *testing.T, want, got map[string]any) {
	t.Helper()
	at, _, _ := unstructured.NestedString(got, "metadata", "annotations", webappv1.AnnotationReconcileRequestedAt)
	if !argoTime.MatchString(at) {
		t.Fatalf("reconcile-now wrote %q, not an RFC 3339 UTC time in seconds", at)
	}
	when, err := time.Parse(time.RFC3339, at)
	if err != nil {
		t.Fatal(err)
	}
	// The script ran a moment ago; a second of slack for the truncation to
	// seconds, a minute for a loaded machine.
	if age := time.Since(when); age < -time.Second || age > time.Minute {
		t.Errorf("reconcile-now wrote %s, %s from now", at, -age)
	}
	if got := webappv1.RequestedReconcileAt(&unstructured.Unstructured{Object: got}); got != at {
		t.Errorf("the operator reads the request %q, want reconcile-now's %q", got, at)
	}
	if err := unstructured.SetNestedField(want, at, "metadata", "annotations", webappv1.AnnotationReconcileRequestedAt); err != nil {
		t.Fatal(err)
	}
}

// suspend and resume undo each other, and discovery follows: each offers the
// other next.
func TestSuspendResumeRoundTrip(t *testing.T) {
	cfg := actions(t)
	orig := load(t, "available")
	suspended := act(t, cfg, "suspend", load(t, "available"))
	if got := discover(t, cfg, suspended); !reflect.DeepEqual(got, offered(true)) {
		t.Errorf("after suspend: %+v, want %+v", got, offered(true))
	}
	resumed := act(t, cfg, "resume", suspended)
	if got := discover(t, cfg, resumed); !reflect.DeepEqual(got, offered(false)) {
		t.Errorf("after resume: %+v, want %+v", got, offered(false))
	}
	unstructured.RemoveNestedField(resumed, "spec", "suspend")
	if !reflect.DeepEqual(resumed, orig) {
		t.Errorf("suspend then resume changed more than spec.suspend:\n%v\n%v", resumed, orig)
	}
}
