package render

import (
	"container/list"
	"sync"
)

// byteLRU is a least-recently-used cache bounded by the bytes it holds, as
// its caller counts them, rather than by entries: what one entry costs
// depends on what a tenant's spec renders, so only a byte budget bounds the
// memory of a cache that tenants fill. It is safe for concurrent use.
type byteLRU[V any] struct {
	mu      sync.Mutex
	budget  int64
	bytes   int64
	order   *list.List // of *byteEntry[V], most recently used first
	entries map[string]*list.Element
	gauge   gauge // told the byte count after every change; may be nil
}

// gauge is what byteLRU reports its byte count to (a Prometheus gauge).
type gauge interface{ Set(float64) }

type byteEntry[V any] struct {
	key   string
	value V
	size  int64
}

// newByteLRU keeps entries whose sizes add up to at most budget bytes.
func newByteLRU[V any](budget int64, g gauge) *byteLRU[V] {
	return &byteLRU[V]{budget: budget, order: list.New(), entries: map[string]*list.Element{}, gauge: g}
}

// Get returns the value of key, and marks it the most recently used.
func (c *byteLRU[V]) Get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*byteEntry[V]).value, true
}

// Add keeps value, which costs size bytes, under key (replacing what key
// held), evicting the least recently used entries until the budget holds
// it. A value larger than the whole budget is not kept, and reports false:
// it would evict everything else and still not fit.
func (c *byteLRU[V]) Add(key string, value V, size int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.report()
	if e, ok := c.entries[key]; ok {
		c.remove(e)
	}
	if size < 0 || size > c.budget {
		return false
	}
	for c.bytes+size > c.budget {
		c.remove(c.order.Back())
	}
	c.entries[key] = c.order.PushFront(&byteEntry[V]{key: key, value: value, size: size})
	c.bytes += size
	return true
}

func (c *byteLRU[V]) remove(e *list.Element) {
	be := c.order.Remove(e).(*byteEntry[V])
	delete(c.entries, be.key)
	c.bytes -= be.size
}

func (c *byteLRU[V]) report() {
	if c.gauge != nil {
		c.gauge.Set(float64(c.bytes))
	}
}

// Len is the number of entries kept.
func (c *byteLRU[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Bytes is the sum of the sizes of the entries kept.
func (c *byteLRU[V]) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
