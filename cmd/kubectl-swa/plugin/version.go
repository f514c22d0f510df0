package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kubectlapply "sigs.k8s.io/kubebuilder-declarative-pattern/applylib/third_party/forked/github.com/kubernetes/kubectl/pkg/cmd/apply"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/version"
)

// operatorLabels select the operator's Deployment, as config/manager and
// the Helm chart label it.
var operatorLabels = client.MatchingLabels{"app.kubernetes.io/name": "simplewebapp-operator", "control-plane": "controller-manager"}

const versionExample = `  # The plugin's version and the operator's, and whether they match
  kubectl swa version

  # The plugin's version only, without a cluster
  kubectl swa version --client -o json`

func newVersionCommand(o *options) *cobra.Command {
	var clientOnly bool
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the operator's, and whether they match",
		Long: `Print the plugin's version and the version of the operator in the cluster, and
whether they match: render, diff and versions run this plugin's copy of the
operator's code, so they foresee what the operator does only when both are
one version.

The operator's version is read from its Deployment (labelled
app.kubernetes.io/name=simplewebapp-operator, control-plane=controller-manager,
in any namespace): its app.kubernetes.io/version label (the Helm chart sets
it), else the manager image's tag. When no such Deployment can be listed (none,
or no right to list them) it is read from the SimpleWebApps of the namespace,
which carry the version of the operator that last applied them (annotation
applyset.kubernetes.io/tooling).`,
		Example: versionExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("--output must be 'yaml' or 'json'")
			}
			return o.version(cmd.Context(), clientOnly, output)
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "If true, shows the plugin's version only (no cluster is needed).")
	cmd.Flags().StringVarP(&output, "output", "o", "", "One of 'yaml' or 'json'.")
	return cmd
}

// versionInfo is what `kubectl swa version` prints.
type versionInfo struct {
	Client    clientVersion     `json:"clientVersion"`
	Operators []operatorVersion `json:"operatorVersions,omitempty"`
	// Match is whether every operator found runs the plugin's version;
	// absent with --client.
	Match *bool `json:"match,omitempty"`
}

type clientVersion struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	GoVersion string `json:"goVersion"`
}

type operatorVersion struct {
	Version string `json:"version"`
	// Source is where the version was read.
	Source string `json:"source"`
}

func (o *options) version(ctx context.Context, clientOnly bool, output string) error {
	info := versionInfo{Client: clientVersion{Version: version.Operator, Revision: o.revision}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.Client.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 && info.Client.Revision == "" {
				info.Client.Revision = s.Value[:12]
			}
		}
	}
	if info.Client.Revision == "" {
		info.Client.Revision = "unknown"
	}
	var lookupErr error
	if !clientOnly {
		info.Operators, lookupErr = o.operatorVersions(ctx)
		if lookupErr == nil {
			match := !slices.ContainsFunc(info.Operators, func(v operatorVersion) bool { return v.Version != version.Operator })
			info.Match = &match
		}
	}
	if output != "" {
		if lookupErr != nil {
			return lookupErr
		}
		return printData(o.streams.Out, output, info)
	}
	fmt.Fprintf(o.streams.Out, "Client Version: %s (revision %s, %s)\n", info.Client.Version, info.Client.Revision, info.Client.GoVersion)
	if lookupErr != nil {
		return lookupErr
	}
	for _, v := range info.Operators {
		fmt.Fprintf(o.streams.Out, "Operator Version: %s (%s)\n", v.Version, v.Source)
	}
	if info.Match != nil && !*info.Match {
		fmt.Fprintf(o.streams.ErrOut, "WARNING: the plugin is version %s and the operator is not: render, diff and versions show what this plugin's copy of the operator's code would do\n", version.Operator)
	}
	return nil
}

// operatorVersions reads the running operator's version from its
// Deployments, else from the SimpleWebApps of the namespace.
func (o *options) operatorVersions(ctx context.Context) ([]operatorVersion, error) {
	cl, _, err := o.connect()
	if err != nil {
		return nil, err
	}
	var deps appsv1.DeploymentList
	listErr := cl.List(ctx, &deps, operatorLabels)
	if listErr != nil && !apierrors.IsForbidden(listErr) {
		return nil, listErr
	}
	var out []operatorVersion
	for _, d := range deps.Items {
		v, from := deploymentVersion(&d)
		out = append(out, operatorVersion{Version: v, Source: fmt.Sprintf("Deployment %s/%s, %s", d.Namespace, d.Name, from)})
	}
	if len(out) > 0 {
		return out, nil
	}
	ns, _, err := o.namespace(false)
	if err != nil {
		return nil, err
	}
	var apps webappv1.SimpleWebAppList
	if err := cl.List(ctx, &apps, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var seen []string
	prefix := render.ManagerName + "/v"
	for _, a := range apps.Items {
		if v, ok := strings.CutPrefix(a.Annotations[kubectlapply.ApplySetToolingAnnotation], prefix); ok && !slices.Contains(seen, v) {
			seen = append(seen, v)
			out = append(out, operatorVersion{Version: v, Source: fmt.Sprintf("the %s annotation of SimpleWebApps in namespace %s", kubectlapply.ApplySetToolingAnnotation, ns)})
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	why := "none found"
	if listErr != nil {
		why = listErr.Error()
	}
	return nil, fmt.Errorf("the operator's version is unknown: no Deployment labelled %s (%s), and no SimpleWebApp in namespace %s applied by the operator", labelString(operatorLabels), why, ns)
}

// deploymentVersion is the operator version of d, and where it was read:
// the Helm chart's version label, else the manager image's tag.
func deploymentVersion(d *appsv1.Deployment) (string, string) {
	if v := d.Labels["app.kubernetes.io/version"]; v != "" {
		return v, "label app.kubernetes.io/version"
	}
	containers := d.Spec.Template.Spec.Containers
	for _, c := range containers {
		if c.Name == "manager" || len(containers) == 1 {
			image := c.Image
			if i := strings.Index(image, "@"); i >= 0 {
				image = image[:i]
			}
			if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
				return strings.TrimPrefix(image[i+1:], "v"), "image " + c.Image
			}
			return "unknown", "image " + c.Image + " has no tag"
		}
	}
	return "unknown", "no manager container"
}

func labelString(l client.MatchingLabels) string {
	var parts []string
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// printData writes v as JSON or YAML, for the outputs that are no
// Kubernetes objects, as `kubectl version -o` does.
func printData(out io.Writer, format string, v any) error {
	var b []byte
	var err error
	if format == "json" {
		b, err = json.MarshalIndent(v, "", "  ")
		b = append(b, '\n')
	} else {
		b, err = yaml.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = out.Write(b)
	return err
}
