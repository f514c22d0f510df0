package guard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// LeaseFence keeps a leader that was paused (SIGSTOP, a frozen VM, a long GC
// or swap stall) from writing once another replica may have taken over.
// client-go's leader elector only notices a lost Lease on its next renew:
// a process that is continued after its Lease expired resumes every
// goroutine at once, and a worker in the middle of a reconcile would send
// its next write before the elector runs. The fence watches the leader
// election client's own Lease writes and refuses every other write while
// the last successful renew is older than validFor (the renew deadline,
// after which the elector gives up itself, well before another replica may
// acquire the Lease at the lease duration).
//
// The time of a renew is taken when its request was sent, and elapsed time
// is measured on the monotonic clock, which runs on while the process is
// stopped.
type LeaseFence struct {
	validFor time.Duration
	now      func() time.Time

	mu      sync.Mutex
	renewed time.Time // when the last successful acquire/renew was sent
}

// NewLeaseFence returns a fence that lets writes through for validFor after
// each successful renew of the Lease.
func NewLeaseFence(validFor time.Duration) *LeaseFence {
	return &LeaseFence{validFor: validFor, now: time.Now}
}

// Observe wraps the leader election client's transport: it records every
// successful write of a Lease that names a holder.
func (f *LeaseFence) Observe(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		sent := f.now()
		resp, err := rt.RoundTrip(req)
		if err != nil || !isWrite(req.Method) || !strings.Contains(req.URL.Path, "/apis/coordination.k8s.io/") ||
			resp.StatusCode < 200 || resp.StatusCode > 299 {
			return resp, err
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if rerr != nil {
			return resp, err
		}
		var lease struct {
			Spec struct {
				HolderIdentity *string `json:"holderIdentity"`
			} `json:"spec"`
		}
		// A release writes an empty holder: that ends writing, not extends
		// it. An answer that is not JSON (main.go asks for JSON) counts as a
		// renew: only the elector writes the Lease through this client.
		if json.Unmarshal(body, &lease) != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "" {
			f.mu.Lock()
			f.renewed = sent
			f.mu.Unlock()
		} else {
			f.mu.Lock()
			f.renewed = time.Time{}
			f.mu.Unlock()
		}
		return resp, err
	})
}

// Guard wraps the operator's client transport: a write is refused unless the
// Lease was renewed within validFor. Token and access reviews (the metrics
// endpoint's authentication) change nothing and always pass.
func (f *LeaseFence) Guard(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if isWrite(req.Method) && !isReview(req.URL.Path) {
			if err := f.check(); err != nil {
				return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
			}
		}
		return rt.RoundTrip(req)
	})
}

func (f *LeaseFence) check() error {
	f.mu.Lock()
	renewed := f.renewed
	f.mu.Unlock()
	if renewed.IsZero() {
		return fmt.Errorf("write refused: this replica does not hold the leader election Lease")
	}
	if age := f.now().Sub(renewed); age > f.validFor {
		return fmt.Errorf("write refused: the leader election Lease was last renewed %s ago (more than %s); another replica may lead", age.Round(time.Millisecond), f.validFor)
	}
	return nil
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func isReview(path string) bool {
	return strings.HasPrefix(path, "/apis/authentication.k8s.io/") || strings.HasPrefix(path, "/apis/authorization.k8s.io/")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
