// Command kubectl-swa is the `kubectl swa` plugin: render, diff and versions
// of SimpleWebApps with the operator's own code. Install it by putting it on
// PATH; kubectl finds plugins by their kubectl- prefix.
package main

import (
	"os"

	"example.com/simplewebapp-operator/cmd/kubectl-swa/plugin"
)

func main() {
	os.Exit(plugin.Main(os.Args[1:], os.Stdout, os.Stderr))
}
