//go:build failpoints

package main

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// withFailpoints is for crash-consistency tests only, in a build with
// `-tags failpoints` (tests/chaos): with SWA_TEST_EXIT_AFTER_WRITES=k the
// process exits with status 137 (as if SIGKILLed) right after its k-th
// write request (POST, PUT, PATCH, DELETE) got its answer, wherever in a
// reconcile that falls. A release build has no such code.
func withFailpoints(cfg *rest.Config) {
	k, err := strconv.Atoi(os.Getenv("SWA_TEST_EXIT_AFTER_WRITES"))
	if err != nil || k <= 0 {
		return
	}
	var writes atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if req.Method != http.MethodGet && writes.Add(1) >= int64(k) {
				fmt.Fprintf(os.Stderr, "SWA_TEST_EXIT_AFTER_WRITES: exiting after write %d (%s %s)\n", k, req.Method, req.URL.Path)
				os.Exit(137)
			}
			return resp, err
		})
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
