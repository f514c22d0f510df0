// Command render prints the build of a kustomization (default config/default)
// with the operator image replaced, for `make deploy IMG=...` and
// `make build-installer` (dist/install.yaml): the same as `kustomize edit set
// image` + `kustomize build`, without the kustomize CLI and without editing
// config/.
//
//	go run ./hack/render [--image registry/simplewebapp-operator:v1[@sha256:...]] [config/default]
package main

import (
	"flag"
	"fmt"
	"os"

	"example.com/simplewebapp-operator/hack/install"
)

func main() {
	image := flag.String("image", "", "the operator image: name[:tag][@digest] (default: config/manager's, "+install.ImageName+":<VERSION>)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [--image IMAGE] [DIR (default config/default)]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	dir := "config/default"
	switch flag.NArg() {
	case 0:
	case 1:
		dir = flag.Arg(0)
	default:
		flag.Usage()
		os.Exit(2)
	}
	out, err := install.Kustomize(dir, *image)
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}
