package guard

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// The reach gate: reconciles wait while the API server gives no answer, one
// probe goes through per wait, the wait doubles while probes fail, and any
// answer ends it.
func TestAPIReach(t *testing.T) {
	now := time.Unix(1000, 0)
	a := &APIReach{Initial: time.Second, Max: 4 * time.Second, now: func() time.Time { return now }}
	refused := errors.New("connect: connection refused")
	advance := func(d time.Duration) { now = now.Add(d) }
	expectHold := func(what string, want time.Duration) {
		t.Helper()
		if got := a.Hold(); got != want {
			t.Fatalf("%s: Hold() = %s, want %s", what, got, want)
		}
	}

	expectHold("reachable", 0)
	a.observe(refused)
	expectHold("just failed", time.Second)
	a.observe(refused) // another request that was in flight: the wait does not grow
	advance(400 * time.Millisecond)
	expectHold("still waiting", 600*time.Millisecond)
	advance(600 * time.Millisecond)
	expectHold("the probe", 0)
	expectHold("others wait for the probe", time.Second)
	a.observe(refused) // the probe failed: the wait doubles
	expectHold("after a failed probe", 2*time.Second)
	for range 3 { // 2 s, 4 s, then at most Max
		advance(a.RetryIn())
		expectHold("the next probe", 0)
		a.observe(refused)
	}
	expectHold("capped", 4*time.Second)
	if !a.Down() || a.RetryIn() != 4*time.Second {
		t.Fatalf("Down %v RetryIn %s", a.Down(), a.RetryIn())
	}
	a.observe(nil) // an informer's relist got an answer
	expectHold("answered", 0)
	if a.Down() {
		t.Fatal("still down after an answer")
	}
	a.observe(refused)
	expectHold("a new outage starts over", time.Second)
}

// Observe counts a request its caller cancelled as no evidence either way,
// and an error status as an answer.
func TestAPIReachObserve(t *testing.T) {
	a := NewAPIReach()
	fail := roundTripper(func(*http.Request) (*http.Response, error) { return nil, errors.New("EOF") })
	answer := roundTripper(func(*http.Request) (*http.Response, error) { return &http.Response{StatusCode: 503}, nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api/healthz", nil)
	_, _ = a.Observe(fail).RoundTrip(req)
	if a.Down() {
		t.Fatal("a cancelled request marked the API server down")
	}
	req, _ = http.NewRequest(http.MethodGet, "https://api/healthz", nil)
	_, _ = a.Observe(fail).RoundTrip(req)
	if !a.Down() || a.Unanswered() != 1 {
		t.Fatalf("a request with no answer: down %t, %d unanswered, want down and 1", a.Down(), a.Unanswered())
	}
	_, _ = a.Observe(answer).RoundTrip(req)
	if a.Down() {
		t.Fatal("a 503 answer did not mark the API server reachable")
	}
}

// WaitReachable retries while there is no answer and returns the first
// answer, error or not.
func TestWaitReachable(t *testing.T) {
	a := &APIReach{Initial: time.Millisecond, Max: 2 * time.Millisecond, now: time.Now}
	calls := 0
	err := WaitReachable(context.Background(), a, func(context.Context) error {
		calls++
		if calls < 4 {
			a.observe(errors.New("connection refused"))
			return errors.New("connection refused")
		}
		a.observe(nil)
		return errors.New("the CRD is older than this operator")
	})
	if calls != 4 || err == nil || err.Error() != "the CRD is older than this operator" {
		t.Fatalf("%d calls, error %v", calls, err)
	}
}

// WaitAPIReady waits through a server that is not ready yet (503, as
// kube-apiserver answers while it starts) and returns once it is.
func TestWaitAPIReady(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) < 3 {
			http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	if err := WaitAPIReady(context.Background(), &rest.Config{Host: srv.URL}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d tries, want 3 (2 not ready, then ready)", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	if err := WaitAPIReady(ctx, &rest.Config{Host: srv.URL}, time.Millisecond); err == nil {
		t.Fatal("returned without error for a server never ready and a cancelled context")
	}
}
