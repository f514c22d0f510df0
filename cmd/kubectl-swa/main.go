// Command kubectl-swa is the `kubectl swa` plugin: render, diff and versions
// of SimpleWebApps with the operator's own code. Install it by putting it on
// PATH; kubectl finds plugins by their kubectl- prefix.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"example.com/simplewebapp-operator/cmd/kubectl-swa/plugin"
)

// revision is the source revision of this build, set by hack/build.sh
// (-ldflags -X main.revision=...); the version is version.Operator.
var revision = ""

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	os.Exit(plugin.Run(os.Args[1:], streams, revision))
}
