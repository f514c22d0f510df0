package metricsauth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/utils/lru"
)

func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		header, token string
		ok            bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"  Bearer   abc  ", "abc", true},
		{"", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic dXNlcjpwdw==", "", false},
		{"abc", "", false},
	} {
		token, ok := BearerToken(c.header)
		if token != c.token || ok != c.ok {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", c.header, token, ok, c.token, c.ok)
		}
	}
}

// The answers of the API server are what a real one decides (TokenReview
// and SubjectAccessReview against the operations suite's API server:
// tests/operations TestMetrics); these stubs count the reviews, to test
// which decisions are reused and for how long.
type tokenReviews struct {
	authnclient.TokenReviewInterface
	users map[string]string // token → user
	calls int
}

func (s *tokenReviews) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	s.calls++
	out := tr.DeepCopy()
	if u, ok := s.users[tr.Spec.Token]; ok {
		out.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: u}}
	}
	return out, nil
}

type accessReviews struct {
	authzclient.SubjectAccessReviewInterface
	allowed map[string]bool // user → may get /metrics
	calls   int
}

func (s *accessReviews) Create(_ context.Context, sar *authzv1.SubjectAccessReview, _ metav1.CreateOptions) (*authzv1.SubjectAccessReview, error) {
	s.calls++
	out := sar.DeepCopy()
	a := sar.Spec.NonResourceAttributes
	out.Status.Allowed = s.allowed[sar.Spec.User] && a.Verb == "get" && a.Path == "/metrics"
	return out, nil
}

func TestDecide(t *testing.T) {
	now := time.Unix(0, 0)
	tokens := &tokenReviews{users: map[string]string{"reader": "prometheus", "other": "someone"}}
	access := &accessReviews{allowed: map[string]bool{"prometheus": true}}
	r := &reviewer{tokens: tokens, access: access, decisions: lru.New(2), now: func() time.Time { return now }}
	ask := func(token string) int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return r.decide(req).code
	}
	steps := []struct {
		name                string
		token               string
		advance             time.Duration
		code                int
		tokenCalls, sarCall int // reviews so far
	}{
		{"no token: no review", "", 0, http.StatusUnauthorized, 0, 0},
		{"a reader", "reader", 0, http.StatusOK, 1, 1},
		{"the reader again: cached", "reader", 59 * time.Second, http.StatusOK, 1, 1},
		{"after a minute: reviewed again", "reader", 2 * time.Second, http.StatusOK, 2, 2},
		{"an unknown token", "bogus", 0, http.StatusUnauthorized, 3, 2},
		{"a user without the right", "other", 0, http.StatusForbidden, 4, 3},
		{"denial cached", "other", 29 * time.Second, http.StatusForbidden, 4, 3},
		// The cache holds 2 decisions: "reader" was the least recently used.
		{"evicted: reviewed again", "reader", 0, http.StatusOK, 5, 4},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		if got := ask(s.token); got != s.code {
			t.Errorf("%s: %d, want %d", s.name, got, s.code)
		}
		if tokens.calls != s.tokenCalls || access.calls != s.sarCall {
			t.Errorf("%s: %d TokenReviews and %d SubjectAccessReviews so far, want %d and %d", s.name, tokens.calls, access.calls, s.tokenCalls, s.sarCall)
		}
	}
	if r.decisions.Len() > 2 {
		t.Errorf("%d cached decisions, bound 2", r.decisions.Len())
	}
	// A POST is a different verb: not the GET's decision.
	req := httptest.NewRequest(http.MethodPost, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer reader")
	if d := r.decide(req); d.code != http.StatusForbidden {
		t.Errorf("POST /metrics as the reader: %d, want 403", d.code)
	}
}
