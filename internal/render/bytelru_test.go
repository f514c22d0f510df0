package render

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// keys lists what c holds, most recently used first.
func (c *byteLRU[V]) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for e := c.order.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*byteEntry[V]).key)
	}
	return out
}

type lastValue struct{ v float64 }

func (g *lastValue) Set(v float64) { g.v = v }

// Entries are evicted least recently used first, a Get counting as a use,
// until the new entry fits; an entry larger than the budget is not kept and
// evicts nothing; a key added again replaces its value and its size.
func TestByteLRU(t *testing.T) {
	type op struct {
		get  string // a Get of this key, or else an Add:
		add  string
		size int64
	}
	for _, tc := range []struct {
		name      string
		ops       []op
		want      []string // most recently used first
		wantBytes int64
	}{
		{"fills up to the budget", []op{{add: "a", size: 40}, {add: "b", size: 60}}, []string{"b", "a"}, 100},
		{"evicts the least recently added", []op{{add: "a", size: 40}, {add: "b", size: 40}, {add: "c", size: 40}}, []string{"c", "b"}, 80},
		{"a get keeps an entry", []op{{add: "a", size: 40}, {add: "b", size: 40}, {get: "a"}, {add: "c", size: 40}}, []string{"c", "a"}, 80},
		{"evicts as many as it takes", []op{{add: "a", size: 30}, {add: "b", size: 30}, {add: "c", size: 30}, {add: "d", size: 90}}, []string{"d"}, 90},
		{"the whole budget is kept", []op{{add: "a", size: 10}, {add: "b", size: 100}}, []string{"b"}, 100},
		{"an oversize entry is not kept and evicts nothing", []op{{add: "a", size: 40}, {add: "b", size: 101}}, []string{"a"}, 40},
		{"replacing updates the size", []op{{add: "a", size: 40}, {add: "b", size: 10}, {add: "a", size: 20}}, []string{"a", "b"}, 30},
		{"replacing can evict others", []op{{add: "a", size: 40}, {add: "b", size: 40}, {add: "a", size: 70}}, []string{"a"}, 70},
		{"an oversize replacement drops the old value", []op{{add: "a", size: 40}, {add: "b", size: 10}, {add: "a", size: 200}}, []string{"b"}, 10},
		{"a miss changes nothing", []op{{add: "a", size: 40}, {add: "b", size: 10}, {get: "c"}}, []string{"b", "a"}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &lastValue{}
			c := newByteLRU[string](100, g)
			for _, o := range tc.ops {
				if o.get != "" {
					c.Get(o.get)
					continue
				}
				kept := c.Add(o.add, o.add+"-value", o.size)
				if kept != (o.size <= 100) {
					t.Errorf("Add(%s, %d) = %v", o.add, o.size, kept)
				}
			}
			if got := c.keys(); !slices.Equal(got, tc.want) {
				t.Errorf("keeps %q, want %q", got, tc.want)
			}
			if c.Len() != len(tc.want) || c.Bytes() != tc.wantBytes || g.v != float64(tc.wantBytes) {
				t.Errorf("Len %d, Bytes %d, gauge %v; want %d, %d", c.Len(), c.Bytes(), g.v, len(tc.want), tc.wantBytes)
			}
			for _, k := range tc.want {
				if v, ok := c.Get(k); !ok || v != k+"-value" {
					t.Errorf("Get(%s) = %q, %v", k, v, ok)
				}
			}
		})
	}
}

// Whatever is added, in whatever order, the entries kept add up to their
// byte count, which never exceeds the budget, also when used concurrently.
func TestByteLRUNeverExceedsItsBudget(t *testing.T) {
	const budget = 1000
	c := newByteLRU[[]byte](budget, nil)
	var wg sync.WaitGroup
	for w := range uint64(4) {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(w, 1))
			for range 2000 {
				k := fmt.Sprint(r.IntN(50))
				if r.IntN(3) == 0 {
					c.Get(k)
					continue
				}
				size := r.Int64N(budget * 3 / 2)
				c.Add(k, make([]byte, size), size)
				if b := c.Bytes(); b > budget {
					t.Errorf("holds %d bytes, more than the budget of %d", b, budget)
					return
				}
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum int64
	for e := c.order.Front(); e != nil; e = e.Next() {
		be := e.Value.(*byteEntry[[]byte])
		if int64(len(be.value)) != be.size {
			t.Errorf("%s: %d bytes recorded as %d", be.key, len(be.value), be.size)
		}
		sum += be.size
	}
	if sum != c.bytes || len(c.entries) != c.order.Len() {
		t.Errorf("entries add up to %d bytes, recorded %d; %d in the map, %d in the list", sum, c.bytes, len(c.entries), c.order.Len())
	}
}
