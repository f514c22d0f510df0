package realnode

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// steadyClient sends GET requests to one URL at a fixed rate, each on a new
// connection and without retries, whatever the answers: a user's view of an
// app while something changes under it. A slow answer does not delay the
// next request.
type steadyClient struct {
	url    string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sent     int
	bodies   map[string]int // successful answers by body
	failures []string       // "time: error" of each failed request
}

func startSteadyClient(ctx context.Context, url string, perSecond int) *steadyClient {
	ctx, cancel := context.WithCancel(ctx)
	c := &steadyClient{url: url, cancel: cancel, bodies: map[string]int{}}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				c.wg.Add(1)
				go c.request(ctx)
			}
		}
	}()
	return c
}

func (c *steadyClient) request(ctx context.Context) {
	defer c.wg.Done()
	sent := time.Now()
	// Not ctx: a request in flight when the client stops is answered, not
	// cancelled, so that stopping is not counted as a failure.
	body, err := get(context.WithoutCancel(ctx), c.url)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent++
	if err != nil {
		c.failures = append(c.failures, fmt.Sprintf("%s: %v", sent.Format("15:04:05.000"), err))
		return
	}
	c.bodies[strings.TrimSpace(body)]++
}

// answered is how many requests were answered with body so far.
func (c *steadyClient) answered(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bodies[body]
}

// stop stops sending, waits for the answers in flight, and returns the
// counts.
func (c *steadyClient) stop() clientResult {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return clientResult{sent: c.sent, bodies: c.bodies, failures: c.failures}
}

type clientResult struct {
	sent     int
	bodies   map[string]int
	failures []string
}

func (r clientResult) ok() int { return r.sent - len(r.failures) }

func (r clientResult) String() string {
	keys := make([]string, 0, len(r.bodies))
	for k := range r.bodies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%q: %d", k, r.bodies[k]))
	}
	s := fmt.Sprintf("%d requests, %d answered (%s), %d failed", r.sent, r.ok(), strings.Join(parts, ", "), len(r.failures))
	if n := len(r.failures); n > 0 {
		s += ":\n  " + strings.Join(r.failures[:min(n, 20)], "\n  ")
	}
	return s
}
