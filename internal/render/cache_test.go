package render

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/metrics"
	"example.com/simplewebapp-operator/internal/step"
	"example.com/simplewebapp-operator/internal/testkit"
)

// Renders are CPU-bound: however many workers reconcile, at most GOMAXPROCS
// render at once. With every slot taken, a render waits, at most the render
// deadline, then asks to be retried; with a slot free it renders, gives the
// slot back, and a second call is served from the cache without a slot.
func TestRenderWaitsForASlot(t *testing.T) {
	rel := stableRelease(t)
	swa := &webappv1.SimpleWebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "slots", Namespace: "default"},
		Spec:       webappv1.SimpleWebAppSpec{Replicas: new(int32(1))},
	}
	c := NewCache(1<<20, 200*time.Millisecond)
	if c.slots.free != runtime.GOMAXPROCS(0) {
		t.Fatalf("%d render slots, want GOMAXPROCS = %d", c.slots.free, runtime.GOMAXPROCS(0))
	}
	others := make([]string, c.slots.free)
	for i := range others {
		others[i] = fmt.Sprintf("other-%d", i)
		if err := c.slots.acquire(context.Background(), others[i], time.Second); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Render(context.Background(), rel, swa)
	var se *step.Error
	if !errors.As(err, &se) || se.Reason != webappv1.ReasonRenderTimeout || se.Terminal || se.RetryAfter != c.Timeout {
		t.Fatalf("render with every slot taken: %v, want a RenderTimeout retried after %s", err, c.Timeout)
	}
	c.slots.release(others[0])
	// Time enough to render however loaded the machine is: the deadline
	// above was for the wait.
	c.Timeout = time.Minute
	if _, err := c.Render(context.Background(), rel, swa); err != nil {
		t.Fatalf("render with a slot free: %v", err)
	}
	waitFor(t, "the render's slot given back", func() bool { return c.slots.heldBy("default") == 0 })
	// A hit needs no slot: take the last one, and the cached render still comes back.
	if err := c.slots.acquire(context.Background(), others[0], time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Render(context.Background(), rel, swa); err != nil {
		t.Fatalf("cached render with every slot taken: %v", err)
	}
}

// waitFor polls cond until it holds, failing after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, what, func(context.Context) (bool, string) { return cond(), "" })
}

// One namespace holds at most all slots but one: its slow renders leave a
// slot to every other namespace.
func TestOneNamespaceLeavesASlot(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := newSlots(n)
			perNS := max(1, n-1)
			for range perNS {
				if err := s.acquire(context.Background(), "busy", time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.acquire(context.Background(), "busy", 10*time.Millisecond); !errors.Is(err, errNoSlot) {
				t.Fatalf("slot %d for one namespace: %v, want %v", perNS+1, err, errNoSlot)
			}
			if n > 1 {
				if err := s.acquire(context.Background(), "calm", 10*time.Millisecond); err != nil {
					t.Fatalf("another namespace next to a busy one: %v", err)
				}
				s.release("calm")
			}
			// A waiter gets the slot released while it waits.
			got := make(chan error, 1)
			go func() { got <- s.acquire(context.Background(), "busy", time.Minute) }()
			s.release("busy")
			if err := <-got; err != nil {
				t.Fatalf("waiter after a release: %v", err)
			}
		})
	}
}

// blockingBuilder renders with kustomize, except that renders in namespace
// "slow" block until release is closed.
type blockingBuilder struct {
	release chan struct{}
	builds  atomic.Int64
}

func (b *blockingBuilder) build(rel Release, swa *webappv1.SimpleWebApp, patches []webappv1.Patch) ([]*unstructured.Unstructured, map[string]any, error) {
	b.builds.Add(1)
	if swa.Namespace == "slow" {
		<-b.release
	}
	return kustomizer{}.build(rel, swa, patches)
}

// A render past its deadline: Stalled/RenderTimeout at once, its slot held
// until it ends; not started again for the same inputs while the status
// reports the timeout, started again when a reconcile is requested.
func TestRenderTimeout(t *testing.T) {
	rel := stableRelease(t)
	c := NewCache(1<<20, 50*time.Millisecond)
	b := &blockingBuilder{release: make(chan struct{})}
	c.build = b
	c.slots = newSlots(2) // one for the late render, one for everyone else
	slow := &webappv1.SimpleWebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "slow", Generation: 3},
		Spec:       webappv1.SimpleWebAppSpec{Replicas: new(int32(1))},
	}
	_, err := c.Render(context.Background(), rel, slow)
	if r := reasonOf(err); r != webappv1.ReasonRenderTimeout {
		t.Fatalf("slow render: %v, want a terminal %s", err, webappv1.ReasonRenderTimeout)
	}
	if c.slots.heldBy("slow") != 1 {
		t.Fatalf("the late render holds %d slots, want 1", c.slots.heldBy("slow"))
	}
	// What the reconciler writes to status.
	slow.Status.Conditions = []metav1.Condition{{Type: webappv1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: webappv1.ReasonRenderTimeout, Message: err.(*step.Error).Message, ObservedGeneration: 3}}
	before := b.builds.Load()
	if _, again := c.Render(context.Background(), rel, slow); reasonOf(again) != webappv1.ReasonRenderTimeout || again.Error() != err.Error() {
		t.Fatalf("same inputs again: %v, want %v", again, err)
	}
	if b.builds.Load() != before {
		t.Fatal("a render that timed out was started again for the same inputs")
	}
	// Another SimpleWebApp renders meanwhile (given time to, however loaded
	// the machine is).
	c.Timeout = time.Minute
	calm := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "calm"}}
	if _, err := c.Render(context.Background(), rel, calm); err != nil {
		t.Fatalf("another namespace's render next to a timed-out one: %v", err)
	}
	// A new generation, and a requested reconcile, are rendered again.
	for name, change := range map[string]func(*webappv1.SimpleWebApp){
		"new generation": func(s *webappv1.SimpleWebApp) { s.Generation = 4 },
		"reconcile requested": func(s *webappv1.SimpleWebApp) {
			s.Annotations = map[string]string{webappv1.AnnotationReconcileRequestedAt: "now"}
		},
		"reconcile requested the Flux way": func(s *webappv1.SimpleWebApp) {
			s.Annotations = map[string]string{webappv1.AnnotationFluxReconcileRequestedAt: "2026-12-01T12:00:00.5Z"}
		},
	} {
		s := slow.DeepCopy()
		change(s)
		if err := timedOutBefore(s, mustKey(t, rel, s)); err != nil {
			t.Errorf("%s: %v, want a render", name, err)
		}
	}
	// A request already handled is no new one.
	handled := slow.DeepCopy()
	handled.Annotations = map[string]string{webappv1.AnnotationFluxReconcileRequestedAt: "2026-12-01T12:00:00.5Z"}
	handled.Status.LastHandledReconcileAt = "2026-12-01T12:00:00.5Z"
	if err := timedOutBefore(handled, mustKey(t, rel, handled)); reasonOf(err) != webappv1.ReasonRenderTimeout {
		t.Errorf("a handled request: %v, want the timeout again", err)
	}
	close(b.release)
	waitFor(t, "the late render's slot", func() bool { return c.slots.heldBy("slow") == 0 })
	// It ended after all: kept, and served.
	if _, err := c.Render(context.Background(), rel, slow); err != nil {
		t.Fatalf("after the late render ended: %v", err)
	}
}

func mustKey(t *testing.T, rel Release, swa *webappv1.SimpleWebApp) string {
	t.Helper()
	k, err := renderKey(rel, swa)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A cached render decodes to what was rendered, and is stored compressed.
func TestRenderCacheRoundTrip(t *testing.T) {
	rel := stableRelease(t)
	swa := &webappv1.SimpleWebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip", Namespace: "default"},
		Spec:       webappv1.SimpleWebAppSpec{Replicas: new(int32(2)), Message: "hello"},
	}
	r, err := Render(rel, swa)
	if err != nil {
		t.Fatal(err)
	}
	b, err := encodeRendered(r)
	if err != nil {
		t.Fatal(err)
	}
	plain := 0
	for _, o := range append(r.Objects, r.Handoffs...) {
		j, _ := o.MarshalJSON()
		plain += len(j)
	}
	if len(b)*2 > plain {
		t.Errorf("cached render is %d bytes for %d bytes of JSON: not compressed", len(b), plain)
	}
	got, err := decodeRendered(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("decoded render differs from the render")
	}
	t.Logf("%d objects: %d bytes of JSON, %d cached", len(r.Objects), plain, len(b))
}

// Renders are kept by their bytes: a cache whose budget holds one render
// keeps the most recent, and simplewebapp_render_cache_bytes says how many
// bytes it holds.
func TestRenderCacheKeepsRendersByBytes(t *testing.T) {
	rel := stableRelease(t)
	swa := func(name string) *webappv1.SimpleWebApp {
		return &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: webappv1.SimpleWebAppSpec{Message: "hello"}}
	}
	// What one render costs: its key and its deflated JSON.
	probe := NewCache(1<<20, 0)
	if _, err := probe.Render(context.Background(), rel, swa("a")); err != nil {
		t.Fatal(err)
	}
	one := probe.cache.Bytes()

	c := NewCache(one*3/2, 0)
	for _, name := range []string{"a", "b"} {
		if _, err := c.Render(context.Background(), rel, swa(name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]bool{"a": false, "b": true} {
		key, err := renderKey(rel, swa(name))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.cache.Get(key); ok != want {
			t.Errorf("render of %s kept: %v, want %v", name, ok, want)
		}
	}
	if b := c.cache.Bytes(); b > one*3/2 {
		t.Errorf("holds %d bytes, more than its budget of %d", b, one*3/2)
	}
	var m dto.Metric
	if err := metrics.RenderCacheBytes.WithLabelValues("renders").Write(&m); err != nil {
		t.Fatal(err)
	}
	if g := m.GetGauge().GetValue(); g != float64(c.cache.Bytes()) {
		t.Errorf("simplewebapp_render_cache_bytes{cache=\"renders\"} = %v, want %d", g, c.cache.Bytes())
	}
}
