//go:build !failpoints

package main

import "k8s.io/client-go/rest"

// withFailpoints does nothing: the test failpoints are only in a build with
// `-tags failpoints` (failpoints.go).
func withFailpoints(*rest.Config) {}
