package render

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/metrics"
	"example.com/simplewebapp-operator/internal/step"
)

// Cache remembers renders, so a reconcile whose inputs did not change
// (a child's status moved, a resync, a restart's first pass is the only
// exception) costs no kustomize run. The key is everything Render reads:
// the package's files, the SimpleWebApp's namespace, name and spec. Renders
// are kept as deflated JSON in an LRU bounded by their bytes.
//
// Render also runs under a deadline. Kustomize cannot be stopped once it
// runs, so a render past its deadline runs on in the background, holding its
// slot, and the SimpleWebApp is Stalled with RenderTimeout: that render is
// not started again for the same inputs (the status says so, which survives a
// restart) until the spec or the package changes or a reconcile is requested.
// The limits in render.go and patchbounds.go keep a render from getting
// that far.
//
// Renders are CPU-bound: at most GOMAXPROCS run at once, however many
// workers reconcile (more would only share the same cores and hold more
// transient memory: a kustomize run allocates megabytes), one namespace holds
// at most all but one of them, and waiting for one is bounded by the same
// deadline (slots.go).
//
// A render the cache does not hold comes from a template (templates)
// when another SimpleWebApp of the same package and spec shape was rendered.
type Cache struct {
	cache     *byteLRU[[]byte]
	templates *templates
	slots     *slots
	Timeout   time.Duration
	// build renders; templates unless a test replaces it.
	build builder
}

// NewCache returns a cache that keeps at most cacheBytes of renders and a
// quarter of that of templates.
func NewCache(cacheBytes int64, timeout time.Duration) *Cache {
	// A quarter: templates are plain JSON and one serves every
	// SimpleWebApp of its package version and spec shape, so they need
	// fewer bytes than renders, and one flag bounds both caches.
	t := newTemplates(cacheBytes/4, metrics.RenderCacheBytes.WithLabelValues("templates"))
	return &Cache{
		cache:     newByteLRU[[]byte](cacheBytes, metrics.RenderCacheBytes.WithLabelValues("renders")),
		templates: t,
		slots:     newSlots(runtime.GOMAXPROCS(0)),
		Timeout:   timeout,
		build:     t,
	}
}

type renderedJSON struct {
	Objects       []json.RawMessage   `json:"objects"`
	Handoffs      []json.RawMessage   `json:"handoffs"`
	HandoffFields map[string][]string `json:"handoffFields,omitempty"`
}

// Render returns Render(rel, swa), from the cache when its inputs are known.
func (c *Cache) Render(ctx context.Context, rel Release, swa *webappv1.SimpleWebApp) (*Rendered, error) {
	key, err := renderKey(rel, swa)
	if err != nil {
		return nil, err
	}
	if v, ok := c.cache.Get(key); ok {
		metrics.RenderCacheHits.Inc()
		return decodeRendered(v)
	}
	if err := timedOutBefore(swa, key); err != nil {
		return nil, err
	}
	timeout := c.timeout()
	if err := c.slots.acquire(ctx, swa.Namespace, timeout); err != nil {
		if errors.Is(err, errNoSlot) {
			return nil, &step.Error{Reason: webappv1.ReasonRenderTimeout, RetryAfter: timeout,
				Message: fmt.Sprintf("no render slot came free within %s: other renders in this namespace or the operator hold them", timeout)}
		}
		return nil, err
	}
	start := time.Now()
	r, err := c.renderWithDeadline(ctx, rel, swa, key, timeout)
	metrics.RenderDuration.Observe(time.Since(start).Seconds())
	return r, err
}

func (c *Cache) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 10 * time.Second
	}
	return c.Timeout
}

// renderWithDeadline renders in a goroutine that holds the slot (taken by
// the caller) until it ends, also when the caller gave up waiting for it; a
// render that ends late is still kept in the cache.
func (c *Cache) renderWithDeadline(ctx context.Context, rel Release, swa *webappv1.SimpleWebApp, key string, timeout time.Duration) (*Rendered, error) {
	type result struct {
		r   *Rendered
		err error
	}
	done := make(chan result, 1)
	swa = swa.DeepCopy()
	go func() {
		defer c.slots.release(swa.Namespace)
		r, err := render(rel, swa, c.build)
		if err == nil {
			var b []byte
			if b, err = encodeRendered(r); err == nil {
				c.cache.Add(key, b, int64(len(key)+len(b)))
			}
		}
		done <- result{r, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case res := <-done:
		return res.r, res.err
	case <-timer.C:
		return nil, step.Stalled(webappv1.ReasonRenderTimeout, "rendering package %s took longer than %s; not tried again until the spec or the package changes or a reconcile is requested (inputs %s)", rel.Version, timeout, inputsID(key))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// inputsID names a render's inputs in a RenderTimeout message.
func inputsID(key string) string { return key[:16] }

// timedOutBefore returns the RenderTimeout the SimpleWebApp's status reports
// for these inputs and this generation, unless a reconcile was requested
// since: a render that ran past its deadline once would again.
func timedOutBefore(swa *webappv1.SimpleWebApp, key string) error {
	if at := webappv1.RequestedReconcileAt(swa); at != "" && at != swa.Status.LastHandledReconcileAt {
		return nil
	}
	c := meta.FindStatusCondition(swa.Status.Conditions, webappv1.ConditionStalled)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != webappv1.ReasonRenderTimeout ||
		c.ObservedGeneration != swa.Generation || !strings.Contains(c.Message, "(inputs "+inputsID(key)+")") {
		return nil
	}
	return step.Stalled(webappv1.ReasonRenderTimeout, "%s", c.Message)
}

// renderKey hashes the package's content and the SimpleWebApp's identity
// and spec.
func renderKey(rel Release, swa *webappv1.SimpleWebApp) (string, error) {
	pkg, err := rel.PackageHash()
	if err != nil {
		return "", err
	}
	spec, err := json.Marshal(swa.Spec)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(pkg + "\x00" + rel.Version + "\x00" + swa.Namespace + "\x00" + swa.Name + "\x00"))
	h.Write(spec)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// marshalRendered is a render as JSON (what the cache deflates).
func marshalRendered(r *Rendered) ([]byte, error) {
	out := renderedJSON{HandoffFields: r.HandoffFields}
	for _, o := range r.Objects {
		b, err := o.MarshalJSON()
		if err != nil {
			return nil, err
		}
		out.Objects = append(out.Objects, b)
	}
	for _, o := range r.Handoffs {
		b, err := o.MarshalJSON()
		if err != nil {
			return nil, err
		}
		out.Handoffs = append(out.Handoffs, b)
	}
	return json.Marshal(out)
}

func encodeRendered(r *Rendered) ([]byte, error) {
	b, err := marshalRendered(r)
	if err != nil {
		return nil, err
	}
	// Compressed: a render's JSON is mostly the same keys and values as the
	// next one's, so deflating keeps a fraction of it in the heap for a few
	// microseconds per cache hit.
	var z bytes.Buffer
	deflater.Lock()
	defer deflater.Unlock()
	if deflater.w == nil {
		deflater.w, _ = flate.NewWriter(nil, flate.BestSpeed) // fails only for an invalid level
	}
	deflater.w.Reset(&z)
	if _, err := deflater.w.Write(b); err != nil {
		return nil, err
	}
	if err := deflater.w.Close(); err != nil {
		return nil, err
	}
	return bytes.Clone(z.Bytes()), nil
}

// deflater is one flate.Writer for every encode: its tables are larger than
// a thousand compressed renders. A sync.Pool would keep one per worker that
// encoded at the same moment (held until two GCs); one writer behind a lock
// costs a few microseconds of waiting, as encodes follow renders, which run
// at most GOMAXPROCS at a time.
var deflater struct {
	sync.Mutex
	w *flate.Writer // made by the first encode
}

func decodeRendered(z []byte) (*Rendered, error) {
	b, err := io.ReadAll(flate.NewReader(bytes.NewReader(z)))
	if err != nil {
		return nil, err
	}
	var in renderedJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	r := &Rendered{HandoffFields: in.HandoffFields}
	for _, raw := range in.Objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		r.Objects = append(r.Objects, u)
	}
	for _, raw := range in.Handoffs {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		r.Handoffs = append(r.Handoffs, u)
	}
	return r, nil
}
