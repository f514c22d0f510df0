package guard

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The fence's transport logic, with a canned API server answer and a clock
// the test moves: writes pass only within validFor of the last successful
// Lease write that names a holder.
func TestLeaseFence(t *testing.T) {
	now := time.Unix(1000, 0)
	f := NewLeaseFence(10 * time.Second)
	f.now = func() time.Time { return now }
	answer := func(body string) http.RoundTripper {
		return roundTripper(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(body))}, nil
		})
	}
	lease := func(holder string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, "https://api/apis/coordination.k8s.io/v1/namespaces/ns/leases/x", nil)
		resp, err := f.Observe(answer(`{"spec":{"holderIdentity":"` + holder + `"}}`)).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "holderIdentity") {
			t.Fatalf("Observe consumed the Lease answer: %q", b)
		}
	}
	write := func(method, path string) error {
		req, _ := http.NewRequest(method, "https://api"+path, nil)
		_, err := f.Guard(answer(`{}`)).RoundTrip(req)
		return err
	}
	const patch = "/apis/apps/v1/namespaces/a/deployments/web"

	if err := write(http.MethodPatch, patch); err == nil {
		t.Error("a write before the Lease was ever acquired passed")
	}
	if err := write(http.MethodGet, patch); err != nil {
		t.Errorf("a read was refused: %v", err)
	}
	if err := write(http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews"); err != nil {
		t.Errorf("a TokenReview was refused: %v", err)
	}
	lease("me")
	now = now.Add(9 * time.Second)
	if err := write(http.MethodPatch, patch); err != nil {
		t.Errorf("a write 9s after a renew (validFor 10s) was refused: %v", err)
	}
	now = now.Add(30 * time.Second) // paused: the Lease may be another's
	err := write(http.MethodDelete, patch)
	if err == nil || !strings.Contains(err.Error(), "last renewed 39s ago") {
		t.Errorf("a write 39s after the last renew: %v, want refused", err)
	}
	lease("me")
	if err := write(http.MethodPut, patch); err != nil {
		t.Errorf("a write right after a renew was refused: %v", err)
	}
	lease("") // released
	if err := write(http.MethodPut, patch); err == nil {
		t.Error("a write after the Lease was released passed")
	}
}
