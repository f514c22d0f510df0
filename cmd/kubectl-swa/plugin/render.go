package plugin

import (
	"bytes"
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
)

const renderExample = `  # The objects the operator would apply for web.yaml, in namespace demo
  kubectl swa render -f web.yaml -n demo

  # Every SimpleWebApp of a kustomize build; other kinds are passed over
  kustomize build overlays/prod | kubectl swa render -f -

  # What version 1.1.0 of the package would render, as a List in JSON
  kubectl swa render -f web.yaml --version 1.1.0 -o json

  # The names of the objects the newest version of channel rapid renders
  kubectl swa render -f web.yaml --channel rapid -o name`

func newRenderCommand(o *options) *cobra.Command {
	var in input
	var version, channel string
	printFlags := genericclioptions.NewPrintFlags("")
	cmd := &cobra.Command{
		Use:   "render (-f FILENAME | -k DIRECTORY)",
		Short: "Print the objects the operator would apply, without a cluster",
		Long: `Print the objects the operator would apply for each SimpleWebApp of the input,
without a cluster. Each SimpleWebApp is first checked as the API server would
check it: the CRD's schema and CEL rules (the CRD is embedded), with its
defaults. Then the channels resolve its version and the operator's render
applies the package, its patch policy and the security floor. A refusal exits
2 with the reason the reconciler would report.

Without -o the output is the format of tests/golden/testdata: each object after
a "---" line, then the fields the package hands off to another field manager.
With -o the objects (hand-off fields merged) are printed as one List.`,
		Example: renderExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var printer printers.ResourcePrinter
			if *printFlags.OutputFormat != "" {
				var err error
				if printer, err = printFlags.ToPrinter(); err != nil {
					return err
				}
			}
			return o.render(cmd.Context(), &in, version, channel, printer)
		},
	}
	in.addFlags(cmd.Flags(), "render")
	cmd.Flags().StringVar(&version, "version", "", "Render this package version (as spec.version).")
	cmd.Flags().StringVar(&channel, "channel", "", "Render the newest version of this channel (as spec.channel, spec.version unset).")
	cmd.MarkFlagsMutuallyExclusive("version", "channel")
	printFlags.AddFlags(cmd)
	return cmd
}

// render prints the objects of each SimpleWebApp with printer, or in the
// golden files' format when printer is nil.
func (o *options) render(ctx context.Context, in *input, version, channel string, printer printers.ResourcePrinter) error {
	ns, explicit, _ := o.namespace(true)
	apps, err := in.load(o.streams.In, o.streams.ErrOut, ns, explicit)
	if err != nil {
		return err
	}
	validator, err := newCRDValidator()
	if err != nil {
		return err
	}
	src := in.source()
	// Nothing is printed unless every SimpleWebApp renders.
	var golden bytes.Buffer
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}}}
	for _, u := range apps {
		u = u.DeepCopy()
		switch {
		case version != "":
			_ = unstructured.SetNestedField(u.Object, version, "spec", "version")
		case channel != "":
			unstructured.RemoveNestedField(u.Object, "spec", "version")
			_ = unstructured.SetNestedField(u.Object, channel, "spec", "channel")
		}
		stored, err := validator.validate(ctx, u)
		if err != nil {
			return err
		}
		swa, err := typed(stored)
		if err != nil {
			return err
		}
		rel, err := src.Resolve(ctx, swa.Spec)
		if err != nil {
			return fmt.Errorf("SimpleWebApp %s/%s: %w", swa.Namespace, swa.Name, err)
		}
		rendered, err := render.Render(rel, swa)
		if err != nil {
			return fmt.Errorf("SimpleWebApp %s/%s: %w", swa.Namespace, swa.Name, err)
		}
		if err := writeGolden(&golden, rendered); err != nil {
			return err
		}
		for _, obj := range rendered.Objects {
			list.Items = append(list.Items, *rendered.WithHandoff(obj))
		}
	}
	if printer == nil {
		_, err = o.streams.Out.Write(golden.Bytes())
		return err
	}
	return printer.PrintObj(list, o.streams.Out)
}

// writeGolden writes r in the format of the golden files (tests/golden):
// each object after a "---" line, then the handoff fields, which the
// operator applies as a separate field manager.
func writeGolden(out *bytes.Buffer, r *render.Rendered) error {
	for _, o := range r.Objects {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	for _, o := range r.Handoffs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		out.WriteString("--- # fields applied by " + apply.HandoffManager + "\n")
		out.Write(b)
	}
	return nil
}
