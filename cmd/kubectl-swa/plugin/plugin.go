// Package plugin is `kubectl swa`: render, diff and versions of
// SimpleWebApps through the operator's own code (render.Channels,
// render.Render, apply.DesiredObjects), so what it shows is what
// the reconciler would do, refusals included.
package plugin

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"example.com/simplewebapp-operator/internal/step"
)

const usage = `kubectl swa: preview SimpleWebApps with the operator's own render.

Commands:
  render   -f cr.yaml [--version V | --channel C] [--channels-dir DIR] [-n NS]
           print the objects the operator would apply (offline)
  diff     -f cr.yaml [--channels-dir DIR] [-n NS] [--kubeconfig F] [--context C]
           server-side dry-run as the operator's field manager; unified diff of
           live vs result. Exit 0: no change, 1: changes, 2: error or refusal
  versions [-f cr.yaml] [--channels-dir DIR] [--offline] [-n NS] [--kubeconfig F] [--context C]
           the channels and versions the operator knows; with -f, which
           version each SimpleWebApp would move to, and why
`

// Main runs the plugin with args (without the program name) and returns the
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return ExitError
		}
		return ExitOK
	}
	var err error
	code := ExitOK
	switch args[0] {
	case "render":
		err = renderCmd(args[1:], stdout)
	case "diff":
		code, err = diff(args[1:], stdout, stderr)
	case "versions":
		err = versions(args[1:], stdout, stderr)
	default:
		err = fmt.Errorf("unknown command %q\n\n%s", args[0], usage)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		var se *step.Error
		if errors.As(err, &se) {
			fmt.Fprintf(stderr, "refused: %s: %s\n", se.Reason, se.Message)
		} else {
			fmt.Fprintf(stderr, "error: %v\n", err)
		}
		return ExitError
	}
	return code
}
