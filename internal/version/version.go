// Package version is this build's version: what a package's
// min-operator-version is compared with, what --version, the startup log,
// simplewebapp_build_info and the ApplySet tooling report.
package version

// Operator is stamped by hack/build.sh from the VERSION file (-ldflags -X
// example.com/simplewebapp-operator/internal/version.Operator=...). The
// default is the same, written by `make sync-version`, so that a plain
// `go build` or `go test` agrees (tests/install checks both).
var Operator = "0.3.0"
