// Package plugin is `kubectl swa`: render, diff, versions and plan of
// SimpleWebApps through the operator's own code (render.Channels,
// render.Render, apply.DesiredObjects), so what it shows is what the
// reconciler would do, refusals included; and resume-version, which lifts a
// version's fleet-wide halt. It is built on cobra and
// k8s.io/cli-runtime, so flags, input and output work as in kubectl.
package plugin

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// Exit codes, as `kubectl diff`: 0 no change, 1 changes, above 1 an error or
// a refusal by the API server or the operator's policy checks.
const (
	ExitOK      = 0
	ExitChanges = 1
	ExitError   = 2
)

// exitCode ends a command with this code and no message: diff's changes, or
// the exit code of $KUBECTL_EXTERNAL_DIFF.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit code %d", int(e)) }

// options are what every command shares: kubectl's connection flags, the
// streams and the build's revision.
type options struct {
	flags    *genericclioptions.ConfigFlags
	streams  genericiooptions.IOStreams
	revision string
}

// NewCommand is `kubectl swa` with its commands. revision is the source
// revision stamped into the binary (empty: read from the build info).
func NewCommand(streams genericiooptions.IOStreams, revision string) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams, revision: revision}
	root := &cobra.Command{
		Use:   "kubectl-swa",
		Short: "Preview SimpleWebApps with the operator's own code",
		Long: `Preview SimpleWebApps with the operator's own code: the channels it resolves
versions from, its render with the patch policy and the security floor, and
the objects exactly as the reconciler writes them. What it shows is what the
operator would do, refusals included. Only resume-version writes: it lifts the
halt the operator put on a version for the fleet.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl swa"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nSee '%s --help' for usage", err, c.CommandPath())
	})
	o.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newRenderCommand(o), newDiffCommand(o), newVersionsCommand(o), newVersionCommand(o),
		newPlanCommand(o), newResumeVersionCommand(o))
	return root
}

// Run runs `kubectl swa` with args (without the program name) and returns
// the exit code; errors and refusals are written to streams.ErrOut.
func Run(args []string, streams genericiooptions.IOStreams, revision string) int {
	cmd := NewCommand(streams, revision)
	cmd.SetArgs(args)
	err := cmd.Execute()
	var code exitCode
	var se *step.Error
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &se):
		fmt.Fprintf(streams.ErrOut, "refused: %s: %s\n", se.Reason, se.Message)
	default:
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	}
	return ExitError
}

// namespace is -n, else the kubeconfig context's namespace, else "default";
// explicit reports -n. offline: an unreadable kubeconfig is no error.
func (o *options) namespace(offline bool) (ns string, explicit bool, err error) {
	if ns := *o.flags.Namespace; ns != "" {
		return ns, true, nil
	}
	ns, _, err = o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil && offline {
		return "default", false, nil
	}
	return ns, false, err
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = webappv1.AddToScheme(s)
	return s
}()

// connect returns a client for the cluster the flags and the kubeconfig
// name (--context, --as, --token, ...), and a dynamic client, which writes
// objects the way the operator's Applier does.
func (o *options) connect() (client.Client, dynamic.Interface, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, nil, err
	}
	// The API server's warnings, as kubectl prints them.
	cfg.WarningHandler = rest.NewWarningWriter(o.streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true})
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	return cl, dyn, err
}
