// Package metricsauth lets only callers that may `get /metrics` read the
// metrics endpoint: the API server reviews the bearer token (TokenReview)
// and authorizes the request (SubjectAccessReview), as controller-runtime's
// filters.WithAuthenticationAndAuthorization does.
//
// Why not that filter: it builds on k8s.io/apiserver's delegating
// authenticator and authorizer, which link the API server's authentication
// stack (webhooks, gRPC, OpenTelemetry) into the operator for two API calls,
// a large part of its binary and of its memory before the first SimpleWebApp
// (docs/benchmarks.md). This is the same check with client-go's typed
// clients.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/lru"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// How long a decision is reused, by outcome: the TTLs of the filter this
// replaces (a token's review 1 min, a denial 30 s), so that a revoked
// binding or token stops working as soon as it did there.
const (
	allowedFor       = time.Minute
	unauthorizedFor  = 10 * time.Second
	forbiddenFor     = 30 * time.Second
	reviewTimeout    = 10 * time.Second
	cachedDecisions  = 256 // bounded: random tokens cannot grow memory
	unauthorizedText = "Unauthorized"
)

// Filter is a metricsserver.FilterProvider.
func Filter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authnclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authzclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	r := &reviewer{
		tokens:    authn.TokenReviews(),
		access:    authz.SubjectAccessReviews(),
		decisions: lru.New(cachedDecisions),
		now:       time.Now,
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			d := r.decide(req)
			if d.err != nil {
				log.Error(d.err, "reviewing a metrics request")
			}
			if d.code != http.StatusOK {
				http.Error(w, d.text, d.code)
				return
			}
			next.ServeHTTP(w, req)
		}), nil
	}, nil
}

type reviewer struct {
	tokens    authnclient.TokenReviewInterface
	access    authzclient.SubjectAccessReviewInterface
	mu        sync.Mutex // lru.Cache is safe; this keeps Get+expiry+Add consistent
	decisions *lru.Cache
	now       func() time.Time
}

type decision struct {
	code    int
	text    string
	err     error // not cached: the API server did not answer
	expires time.Time
}

// decide is the answer to req: 200, 401 (no or a rejected token), 403 (the
// token's user may not get the path) or 500 (a review failed).
func (r *reviewer) decide(req *http.Request) decision {
	token, ok := BearerToken(req.Header.Get("Authorization"))
	if !ok {
		return decision{code: http.StatusUnauthorized, text: unauthorizedText}
	}
	verb := strings.ToLower(req.Method)
	// The cache holds a digest, not the token.
	key := sha256.Sum256([]byte(token + "\x00" + verb + "\x00" + req.URL.Path))
	r.mu.Lock()
	if v, ok := r.decisions.Get(key); ok {
		if d := v.(decision); r.now().Before(d.expires) {
			r.mu.Unlock()
			return d
		}
	}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(req.Context(), reviewTimeout)
	defer cancel()
	d := r.review(ctx, token, verb, req.URL.Path)
	if d.err == nil {
		r.mu.Lock()
		r.decisions.Add(key, d)
		r.mu.Unlock()
	}
	return d
}

func (r *reviewer) review(ctx context.Context, token, verb, path string) decision {
	tr, err := r.tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return decision{code: http.StatusInternalServerError, text: "Authentication failed", err: fmt.Errorf("TokenReview: %w", err)}
	}
	if !tr.Status.Authenticated {
		return decision{code: http.StatusUnauthorized, text: unauthorizedText, expires: r.now().Add(unauthorizedFor)}
	}
	u := tr.Status.User
	extra := make(map[string]authzv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := r.access.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return decision{code: http.StatusInternalServerError, text: "Authorization failed", err: fmt.Errorf("SubjectAccessReview for %s: %w", u.Username, err)}
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return decision{code: http.StatusForbidden, text: fmt.Sprintf("Authorization denied for user %s", u.Username), expires: r.now().Add(forbiddenFor)}
	}
	return decision{code: http.StatusOK, expires: r.now().Add(allowedFor)}
}

// BearerToken is the token of an Authorization header "Bearer <token>" (the
// scheme case-insensitive, as the API server reads it).
func BearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
