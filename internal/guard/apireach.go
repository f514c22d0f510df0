package guard

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// APIReach holds reconciles back while the API server cannot be reached (a
// restart, a network partition, a stopped etcd behind a load balancer).
// Without it every SimpleWebApp's reconcile fails on its first write and is
// retried by the work queue's rate limiter (5 ms per item, doubling, and 10/s
// for the queue): about 10 requests a second into a dead endpoint for as long
// as the outage lasts, then a thundering herd.
//
// It learns from the operator's own requests (Observe wraps the clients'
// transports): a request that fails before any answer marks the API server
// unreachable; any answer, even an error status, marks it reachable again.
// While it is unreachable, Hold tells a reconcile how long to wait. Once the
// wait is over, one reconcile is let through as a probe; if that probe fails
// too, the wait doubles (from Initial up to Max). The informers' own list and
// watch retries (with their own backoff) and the leader election's renews
// count as observations, so the first answer from any of them lets every
// reconcile through again.
type APIReach struct {
	Initial, Max time.Duration
	now          func() time.Time

	mu      sync.Mutex
	down    bool
	probing bool
	backoff time.Duration
	retryAt time.Time
	// unanswered counts the requests that got no answer, ever.
	unanswered uint64
}

// NewAPIReach waits 500 ms after the first failure, doubling up to 30 s.
func NewAPIReach() *APIReach {
	return &APIReach{Initial: 500 * time.Millisecond, Max: 30 * time.Second, now: time.Now}
}

var apiUnreachable = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "simplewebapp_api_server_unreachable",
	Help: "1 while the operator's requests to the API server fail before an answer and reconciles are held back.",
})

func init() { metrics.Registry.MustRegister(apiUnreachable) }

// Observe wraps a client transport: it records whether each request got an
// answer. A request its own caller cancelled says nothing about the server.
func (a *APIReach) Observe(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil && req.Context().Err() != nil {
			return resp, err
		}
		a.observe(err)
		return resp, err
	})
}

func (a *APIReach) observe(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		if a.down {
			log.Log.WithName("api-reach").Info("API server reachable again: reconciles resume")
			apiUnreachable.Set(0)
		}
		a.down, a.probing, a.backoff = false, false, 0
		return
	}
	a.unanswered++
	now := a.now()
	switch {
	case !a.down:
		log.Log.WithName("api-reach").Info("API server unreachable: reconciles held back", "error", err.Error())
		apiUnreachable.Set(1)
		a.down, a.backoff = true, a.Initial
	case a.probing:
		a.probing, a.backoff = false, min(2*a.backoff, a.Max)
	default:
		return // a request sent before the outage was noticed, or an informer's retry
	}
	a.retryAt = now.Add(a.backoff)
}

// Hold is how long a reconcile should wait before it sends any request: 0
// while the API server is reachable, or for the one probe let through after
// each wait.
func (a *APIReach) Hold() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.down {
		return 0
	}
	now := a.now()
	if now.Before(a.retryAt) {
		return a.retryAt.Sub(now)
	}
	// This reconcile is the probe; the others wait for its answer (or, if
	// it sends nothing, for the next probe).
	a.probing, a.retryAt = true, now.Add(a.backoff)
	return 0
}

// RetryIn is how long a reconcile that failed during the outage waits: until
// the next probe, and never 0 (a zero requeue would drop it).
func (a *APIReach) RetryIn() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(a.retryAt.Sub(a.now()), a.Initial)
}

// Unanswered is how many of the operator's requests got no answer so far: a
// reconcile that sees it grow failed for want of an answer, even when another
// request's answer has marked the server reachable again in the meantime (a
// server still starting answers some requests and drops others).
func (a *APIReach) Unanswered() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unanswered
}

// Down reports whether the API server was unreachable at the last request.
func (a *APIReach) Down() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.down
}

// WaitReachable retries read until it gets an answer from the API server
// (success or an error status), waiting as Hold says in between: a process
// started during an outage waits for it instead of exiting (and being
// restarted again and again). It returns read's last error, or ctx's.
func WaitReachable(ctx context.Context, a *APIReach, read func(context.Context) error) error {
	for {
		err := read(ctx)
		if err == nil || !a.Down() {
			return err
		}
		for wait := a.Hold(); wait > 0; wait = a.Hold() {
			if cerr := sleep(ctx, wait); cerr != nil {
				return errors.Join(err, cerr)
			}
		}
	}
}

// WaitAPIReady waits until the API server says it is ready (GET /readyz,
// which every user may read), waiting initial, doubling up to 30 s, between
// tries. A process started while the API server restarts would otherwise
// exit at its first discovery request (the manager's REST mapper) and be
// restarted again and again.
func WaitAPIReady(ctx context.Context, cfg *rest.Config, initial time.Duration) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	wait := initial
	for {
		_, err := dc.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil {
			return nil
		}
		log.Log.WithName("api-reach").Info("API server not ready, waiting", "error", err.Error(), "retryIn", wait.String())
		if cerr := sleep(ctx, wait); cerr != nil {
			return errors.Join(err, cerr)
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// sleep waits d, or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
