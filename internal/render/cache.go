package render

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"runtime"
	"sync"
	"time"

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
// Render also runs under a deadline: a render that takes longer fails with
// RenderFailed instead of holding a worker (the limits in render.go keep it
// from getting that far).
//
// Renders are CPU-bound: at most GOMAXPROCS run at once, however many
// workers reconcile (more would only share the same cores and hold more
// transient memory: a kustomize run allocates megabytes).
//
// A render the cache does not hold comes from a template (templates)
// when another SimpleWebApp of the same package and spec shape was rendered.
type Cache struct {
	cache     *byteLRU[[]byte]
	templates *templates
	slots     chan struct{}
	Timeout   time.Duration
}

// NewCache returns a cache that keeps at most cacheBytes of renders and a
// quarter of that of templates.
func NewCache(cacheBytes int64, timeout time.Duration) *Cache {
	return &Cache{
		cache: newByteLRU[[]byte](cacheBytes, metrics.RenderCacheBytes.WithLabelValues("renders")),
		// A quarter: templates are plain JSON and one serves every
		// SimpleWebApp of its package version and spec shape, so they need
		// fewer bytes than renders, and one flag bounds both caches.
		templates: newTemplates(cacheBytes/4, metrics.RenderCacheBytes.WithLabelValues("templates")),
		slots:     make(chan struct{}, runtime.GOMAXPROCS(0)),
		Timeout:   timeout,
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
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	start := time.Now()
	r, err := c.renderWithDeadline(ctx, rel, swa)
	metrics.RenderDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	b, err := encodeRendered(r)
	if err != nil {
		return nil, err
	}
	c.cache.Add(key, b, int64(len(key)+len(b)))
	return r, nil
}

// renderWithDeadline renders in a goroutine that holds a slot (taken by the
// caller) until it ends, also when the caller gave up waiting for it.
func (c *Cache) renderWithDeadline(ctx context.Context, rel Release, swa *webappv1.SimpleWebApp) (*Rendered, error) {
	type result struct {
		r   *Rendered
		err error
	}
	done := make(chan result, 1)
	swa = swa.DeepCopy()
	go func() {
		r, err := render(rel, swa, c.templates)
		<-c.slots
		done <- result{r, err}
	}()
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	select {
	case res := <-done:
		return res.r, res.err
	case <-time.After(timeout):
		return nil, step.Stalled(webappv1.ReasonRenderFailed, "rendering package %s took longer than %s", rel.Version, timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// renderKey hashes the package's files and the SimpleWebApp's identity and
// spec.
func renderKey(rel Release, swa *webappv1.SimpleWebApp) (string, error) {
	h := sha256.New()
	if err := hashFiles(h, rel.Files); err != nil {
		return "", err
	}
	spec, err := json.Marshal(swa.Spec)
	if err != nil {
		return "", err
	}
	h.Write([]byte(rel.Version + "\x00" + swa.Namespace + "\x00" + swa.Name + "\x00"))
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
