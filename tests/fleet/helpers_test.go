package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// testLabel marks a test's SimpleWebApps, to list them at once.
const testLabel = "test.simplewebapp.example.com/fleet"

// fleetOf is one test's SimpleWebApps.
type fleetOf struct {
	test       string
	namespaces []string
	apps       []client.ObjectKey
}

// createFleet creates perNS SimpleWebApps following channel in each of n
// new namespaces, alternately in shard a and b; spec may change each.
func createFleet(t *testing.T, test string, n, perNS int, channel string, spec func(ns string, i int, s *webappv1.SimpleWebAppSpec)) *fleetOf {
	t.Helper()
	ctx := t.Context()
	f := &fleetOf{test: test}
	i := 0
	for range n {
		ns := testkit.Namespace(t, env.C, testkit.NS{Prefix: test + "-", WaitForServiceAccount: true})
		f.namespaces = append(f.namespaces, ns)
		for j := range perNS {
			s := webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Channel: channel, Message: fmt.Sprintf("app %d", i),
				UpgradeTimeout: &metav1.Duration{Duration: upgradeTimeout}}
			if spec != nil {
				spec(ns, j, &s)
			}
			swa := &webappv1.SimpleWebApp{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%d", j),
					Labels: map[string]string{shardLabel: []string{"a", "b"}[i%2], testLabel: test}},
				Spec: s,
			}
			if err := env.C.Create(ctx, swa); err != nil {
				t.Fatalf("creating %s/%s: %v", ns, swa.Name, err)
			}
			f.apps = append(f.apps, client.ObjectKeyFromObject(swa))
			i++
		}
	}
	return f
}

// list returns the test's SimpleWebApps by namespace/name.
func (f *fleetOf) list(ctx context.Context) (map[string]*webappv1.SimpleWebApp, error) {
	var list webappv1.SimpleWebAppList
	if err := env.C.List(ctx, &list, client.MatchingLabels{testLabel: f.test}); err != nil {
		return nil, err
	}
	out := map[string]*webappv1.SimpleWebApp{}
	for i := range list.Items {
		out[list.Items[i].Namespace+"/"+list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// waitAll waits until every app satisfies ok, and returns them.
func (f *fleetOf) waitAll(t *testing.T, timeout time.Duration, what string, ok func(*webappv1.SimpleWebApp) (bool, string)) map[string]*webappv1.SimpleWebApp {
	t.Helper()
	var last map[string]*webappv1.SimpleWebApp
	seen := ""
	testkit.WaitFor(t, timeout, fmt.Sprintf("all %d SimpleWebApps of %s: %s", len(f.apps), f.test, what), func(ctx context.Context) (bool, string) {
		apps, err := f.list(ctx)
		if err != nil {
			return false, seen + " (then " + err.Error() + ")"
		}
		if len(apps) != len(f.apps) {
			return false, fmt.Sprintf("%d of %d listed", len(apps), len(f.apps))
		}
		var not []string
		for name, swa := range apps {
			if done, why := ok(swa); !done {
				not = append(not, name+": "+why)
			}
		}
		sort.Strings(not)
		if len(not) > 0 {
			seen = fmt.Sprintf("%d not yet, e.g. %s", len(not), strings.Join(not[:min(3, len(not))], "; "))
			return false, seen
		}
		last = apps
		return true, ""
	}, env.waitOpts(nil))
	return last
}

// readyOn: Ready, running version as its last healthy one.
func readyOn(version string) func(*webappv1.SimpleWebApp) (bool, string) {
	return func(swa *webappv1.SimpleWebApp) (bool, string) {
		st := swa.Status
		ready := apimeta.FindStatusCondition(st.Conditions, webappv1.ConditionReady)
		if st.Version != version || st.LastHealthyVersion != version || ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != swa.Generation {
			return false, fmt.Sprintf("version %q lastHealthy %q Ready %v", st.Version, st.LastHealthyVersion, ready)
		}
		return true, ""
	}
}

// rollout reads the roll-out state of version (nil if none).
func rollout(ctx context.Context, version string) (*fleet.State, error) {
	var list corev1.ConfigMapList
	if err := env.C.List(ctx, &list, client.InNamespace(operatortest.Namespace), client.MatchingLabels{fleet.StateLabel: "true"}); err != nil {
		return nil, err
	}
	var found *fleet.State
	for i := range list.Items {
		st, err := fleet.FromConfigMap(&list.Items[i])
		if err != nil {
			return nil, err
		}
		if st.Key.Version == version {
			if found != nil {
				return nil, fmt.Errorf("two states for %s: %s and %s", version, found.Key, st.Key)
			}
			found = st
		}
	}
	return found, nil
}

// waitRollout waits until version's roll-out state satisfies ok.
func waitRollout(t *testing.T, timeout time.Duration, version, what string, ok func(*fleet.State) bool) *fleet.State {
	t.Helper()
	var st *fleet.State
	testkit.WaitFor(t, timeout, "roll-out of "+version+": "+what, func(ctx context.Context) (bool, string) {
		var err error
		if st, err = rollout(ctx, version); err != nil {
			return false, err.Error()
		}
		if st == nil {
			return false, "no state"
		}
		return ok(st), fmt.Sprintf("%+v", *st)
	}, env.waitOpts(nil))
	return st
}

// upgradingEvents counts, per app, the operator's Upgrading events to
// version in the fleet's namespaces.
func (f *fleetOf) upgradingEvents(ctx context.Context, version string) (map[string]int, error) {
	return f.events(ctx, "Upgrading", "to "+version+";")
}

// events counts, per app, the events with reason whose note holds text.
func (f *fleetOf) events(ctx context.Context, reason, text string) (map[string]int, error) {
	out := map[string]int{}
	for _, ns := range f.namespaces {
		var list eventsv1.EventList
		if err := env.C.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for _, e := range list.Items {
			if e.Reason == reason && e.Regarding.Kind == "SimpleWebApp" && strings.Contains(e.Note, text) {
				out[ns+"/"+e.Regarding.Name]++
			}
		}
	}
	return out, nil
}

// sampler watches a roll-out of version from the outside: the sample in
// which each app was first seen upgrading (or already on it) and first seen
// done (on it, or rolled back from it), and the most apps of each shard seen
// upgrading at once.
type sampler struct {
	f       *fleetOf
	version string
	stop    context.CancelFunc
	done    chan struct{}

	mu         sync.Mutex
	n          int
	started    map[string]int
	finished   map[string]int
	maxInShard map[string]int
}

func (f *fleetOf) sample(ctx context.Context, version string) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{f: f, version: version, stop: cancel, done: make(chan struct{}),
		started: map[string]int{}, finished: map[string]int{}, maxInShard: map[string]int{}}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			s.once(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *sampler) once(ctx context.Context) {
	apps, err := s.f.list(ctx)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	upgrading := map[string]int{}
	for name, swa := range apps {
		st := swa.Status
		up := st.Upgrade != nil && st.Upgrade.To == s.version
		on := st.LastHealthyVersion == s.version
		failed := st.FailedUpgrade != nil && st.FailedUpgrade.Version == s.version
		if up {
			upgrading[swa.Labels[shardLabel]]++
		}
		if _, ok := s.started[name]; !ok && (up || on || failed || st.Version == s.version) {
			s.started[name] = s.n
		}
		if _, ok := s.finished[name]; !ok && (on || failed) {
			s.finished[name] = s.n
		}
	}
	for shard, n := range upgrading {
		s.maxInShard[shard] = max(s.maxInShard[shard], n)
	}
}

func (s *sampler) end() {
	s.stop()
	<-s.done
}

// checkWaves checks that no app of a wave was seen starting before every
// app of the wave before it was seen done: a start seen in an earlier sample
// than a finish happened before it.
func (s *sampler) checkWaves(t *testing.T, st *fleet.State) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	waves := append([][]string{}, st.Waves...)
	var rest []string
	inWave := map[string]bool{}
	for _, w := range st.Waves {
		for _, m := range w {
			inWave[m] = true
		}
	}
	for name := range s.started {
		if !inWave[name] {
			rest = append(rest, name)
		}
	}
	waves = append(waves, rest)
	for w := 1; w < len(waves); w++ {
		lastDone, by := 0, ""
		for _, m := range waves[w-1] {
			if s.finished[m] > lastDone {
				lastDone, by = s.finished[m], m
			}
		}
		for _, m := range waves[w] {
			if s.started[m] != 0 && s.started[m] < lastDone {
				t.Errorf("%s (wave %d) was seen upgrading in sample %d, before %s (wave %d) was done (sample %d)", m, w+1, s.started[m], by, w, lastDone)
			}
		}
	}
	t.Logf("%d samples; waves of %v apps; most apps upgrading at once per shard: %v", s.n, waveSizes(waves), s.maxInShard)
}

func waveSizes(waves [][]string) []int {
	out := make([]int, len(waves))
	for i, w := range waves {
		out[i] = len(w)
	}
	return out
}

// metric reads one sample of the leader of shard's /metrics: the value of
// the series whose line starts with prefix, or "" if none.
func metric(ctx context.Context, replica, prefix string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.metrics[replica], nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(l, prefix)), nil
		}
	}
	return "", nil
}

// requestReconcile asks every app for a reconcile and waits until each
// says it handled it: the operators that run now have looked at all of them.
func (f *fleetOf) requestReconcile(t *testing.T, token string) {
	t.Helper()
	ctx := t.Context()
	for _, k := range f.apps {
		swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, webappv1.AnnotationReconcileRequestedAt, token)
		if err := env.C.Patch(ctx, swa, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	f.waitAll(t, time.Minute, "reconcile request "+token+" handled", func(swa *webappv1.SimpleWebApp) (bool, string) {
		return swa.Status.LastHandledReconcileAt == token, "lastHandledReconcileAt " + swa.Status.LastHandledReconcileAt
	})
}
