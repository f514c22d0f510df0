package render

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/metrics"
)

// Renders are CPU-bound: however many workers reconcile, at most GOMAXPROCS
// render at once. With every slot taken, a render waits (here until its
// context ends) instead of starting; with a slot free it renders, and a
// second call is served from the cache.
func TestRenderWaitsForASlot(t *testing.T) {
	rel := stableRelease(t)
	swa := &webappv1.SimpleWebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "slots", Namespace: "default"},
		Spec:       webappv1.SimpleWebAppSpec{Replicas: new(int32(1))},
	}
	c := NewCache(1<<20, 0)
	if got := cap(c.slots); got != runtime.GOMAXPROCS(0) {
		t.Fatalf("%d render slots, want GOMAXPROCS = %d", got, runtime.GOMAXPROCS(0))
	}
	for range cap(c.slots) {
		c.slots <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Render(ctx, rel, swa); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("render with every slot taken: %v, want it to wait until the deadline", err)
	}
	<-c.slots
	if _, err := c.Render(context.Background(), rel, swa); err != nil {
		t.Fatalf("render with a slot free: %v", err)
	}
	if n := len(c.slots); n != cap(c.slots)-1 {
		t.Fatalf("%d slots taken after the render ended, want %d (the render gives its slot back)", n, cap(c.slots)-1)
	}
	// A hit needs no slot: take the last one, and the cached render still comes back.
	c.slots <- struct{}{}
	if _, err := c.Render(context.Background(), rel, swa); err != nil {
		t.Fatalf("cached render with every slot taken: %v", err)
	}
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
