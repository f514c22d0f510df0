package plugin

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

const versionsExample = `  # The channels and package versions the operator knows
  kubectl swa versions

  # Which version each SimpleWebApp of the cluster would move to, and why
  kubectl get swa -A -o yaml | kubectl swa versions -f -

  # The same for a file, without asking the cluster for the live status
  kubectl swa versions -f web.yaml --offline -o json`

func newVersionsCommand(o *options) *cobra.Command {
	var in input
	var offline bool
	var output string
	cmd := &cobra.Command{
		Use:   "versions [-f FILENAME | -k DIRECTORY]",
		Short: "List the channels and versions, and the version each SimpleWebApp would move to",
		Long: `List the channels and package versions the operator knows (the embedded tree,
with --channels-dir laid over it) and the withdrawn versions. With -f or -k, for
each SimpleWebApp: the version it runs (read from the cluster unless
--offline), the version the reconciler would apply and why (pinned, newest of
a channel, held back after a rollback), and the move.`,
		Example: versionsExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: json, yaml", output)
			}
			r, err := o.versions(cmd.Context(), &in, offline)
			if err != nil {
				return err
			}
			if output != "" {
				return printData(o.streams.Out, output, r)
			}
			return r.print(o.streams.Out)
		},
	}
	in.addFlags(cmd.Flags(), "look at")
	cmd.Flags().BoolVar(&offline, "offline", false, "Do not read the SimpleWebApps' status from the cluster.")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format. One of: (json, yaml). Default: tables and text.")
	return cmd
}

// versionsReport is what `kubectl swa versions` knows.
type versionsReport struct {
	Channels []channelReport `json:"channels"`
	Package  struct {
		Name     string   `json:"name"`
		Versions []string `json:"versions"`
	} `json:"package"`
	Withdrawn      []withdrawnReport `json:"withdrawn,omitempty"`
	WithdrawnError string            `json:"withdrawnError,omitempty"`
	SimpleWebApps  []appReport       `json:"simpleWebApps,omitempty"`
}

type channelReport struct {
	Name     string   `json:"name"`
	Newest   string   `json:"newest,omitempty"`
	Versions []string `json:"versions,omitempty"`
	From     string   `json:"from"`
	Error    string   `json:"error,omitempty"`
}

type withdrawnReport struct {
	Version string `json:"version"`
	Reason  string `json:"reason"`
}

// appReport is one SimpleWebApp: what runs (when the cluster was asked),
// the version the reconciler would apply and why, and the move.
type appReport struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	Running        string `json:"running,omitempty"`
	RunningVersion string `json:"runningVersion,omitempty"`
	Desired        string `json:"desired,omitempty"`
	Reason         string `json:"reason,omitempty"`
	Would          string `json:"would"`
}

// versions lists the channels and package versions the operator knows and,
// for each SimpleWebApp of in, the version it would run and why.
func (o *options) versions(ctx context.Context, in *input, offline bool) (*versionsReport, error) {
	src := in.source()
	r := channelsReport(ctx, src)
	if !in.given() {
		return r, nil
	}
	var cl client.Client
	if !offline {
		_, _, err := o.namespace(false)
		if err == nil {
			cl, _, err = o.connect()
		}
		if err != nil {
			fmt.Fprintf(o.streams.ErrOut, "warning: no cluster (%v): answering from the input alone (--offline)\n", oneLine(err.Error()))
			cl = nil
		}
	}
	ns, explicit, _ := o.namespace(true)
	us, err := in.load(o.streams.In, o.streams.ErrOut, ns, explicit)
	if err != nil {
		return nil, err
	}
	apps, err := typedAll(us)
	if err != nil {
		return nil, err
	}
	for _, swa := range apps {
		a, err := appVersions(ctx, src, cl, swa)
		if err != nil {
			return nil, err
		}
		r.SimpleWebApps = append(r.SimpleWebApps, a)
	}
	return r, nil
}

// channelsReport is each channel's versions and the package's.
func channelsReport(ctx context.Context, src render.Channels) *versionsReport {
	r := &versionsReport{}
	for _, ch := range channelNames(src) {
		listed, from, err := channelVersions(src, ch)
		c := channelReport{Name: ch, Versions: listed, From: from}
		if rel, rerr := src.Resolve(ctx, webappv1.SimpleWebAppSpec{Channel: ch}); rerr == nil {
			c.Newest = rel.Version
		} else if err == nil {
			err = rerr
		}
		if err != nil {
			c.Newest, c.Versions, c.Error = "", nil, oneLine(err.Error())
		}
		r.Channels = append(r.Channels, c)
	}
	r.Package.Name, r.Package.Versions = render.PackageName, packageVersions(src)
	withdrawn, err := src.Withdrawals()
	if err != nil {
		r.WithdrawnError = oneLine(err.Error())
	}
	for _, v := range slices.Sorted(maps.Keys(withdrawn)) {
		r.Withdrawn = append(r.Withdrawn, withdrawnReport{Version: v, Reason: withdrawn[v].Reason})
	}
	return r
}

// print writes r for people: the channels as a table, then the package,
// the withdrawn versions and each SimpleWebApp.
func (r *versionsReport) print(out io.Writer) error {
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Channel", Type: "string"}, {Name: "Newest", Type: "string"},
		{Name: "Versions", Type: "string"}, {Name: "From", Type: "string"},
	}}
	for _, c := range r.Channels {
		newest, versions := c.Newest, strings.Join(c.Versions, ", ")
		if c.Error != "" {
			newest, versions = "-", c.Error
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{c.Name, newest, versions, c.From}})
	}
	if err := printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(table, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nPACKAGE %s: %s\n", r.Package.Name, strings.Join(r.Package.Versions, ", "))
	if r.WithdrawnError != "" {
		fmt.Fprintf(out, "WITHDRAWN: %s\n", r.WithdrawnError)
	}
	for _, w := range r.Withdrawn {
		fmt.Fprintf(out, "WITHDRAWN %s: %s\n", w.Version, w.Reason)
	}
	for _, a := range r.SimpleWebApps {
		fmt.Fprintf(out, "\nSimpleWebApp %s/%s:\n", a.Namespace, a.Name)
		if a.Running != "" {
			fmt.Fprintf(out, "  running:  %s\n", a.Running)
		}
		if a.Desired != "" {
			fmt.Fprintf(out, "  desired:  %s: %s\n", a.Desired, a.Reason)
		}
		fmt.Fprintf(out, "  would:    %s\n", a.Would)
	}
	return nil
}

// appVersions is what runs of swa (when the cluster is reachable: cl), the
// version it would get, and the move.
func appVersions(ctx context.Context, src render.Channels, cl client.Client, swa *webappv1.SimpleWebApp) (appReport, error) {
	a := appReport{Namespace: swa.Namespace, Name: swa.Name}
	// The reconciler decides from the stored object: the spec of the file
	// as the API server would store it, and the live status.
	var live *webappv1.SimpleWebApp
	target := swa
	if cl != nil {
		var err error
		if live, target, err = dryRunSimpleWebApp(ctx, cl, swa); err != nil {
			return a, fmt.Errorf("SimpleWebApp %s/%s: %w", swa.Namespace, swa.Name, err)
		}
		if live == nil {
			a.Running = "nothing (not in the cluster)"
		} else {
			a.Running, a.RunningVersion = running(live), live.Status.Version
		}
	}
	rel, why, err := targetRelease(ctx, src, target)
	if err != nil {
		a.Would = fmt.Sprintf("stall: %v", err)
		return a, nil
	}
	a.Desired, a.Reason = rel.Version, why
	switch {
	case live == nil && cl != nil:
		a.Would = "install " + rel.Version
	case live == nil:
		a.Would = "run " + rel.Version
	case live.Status.Version == rel.Version:
		a.Would = "stay at " + rel.Version
	case live.Status.Version == "":
		a.Would = "install " + rel.Version
	default:
		a.Would = fmt.Sprintf("move %s -> %s (%s)", live.Status.Version, rel.Version, direction(live.Status.Version, rel.Version))
	}
	return a, nil
}

func running(live *webappv1.SimpleWebApp) string {
	st := live.Status
	if st.Version == "" {
		return "nothing applied yet"
	}
	s := st.Version
	if st.Channel != "" {
		s += fmt.Sprintf(" (from channel %q)", st.Channel)
	} else {
		s += " (pinned)"
	}
	for _, c := range st.Conditions {
		if c.Type == webappv1.ConditionReady {
			s += fmt.Sprintf(", Ready=%s %s", c.Status, c.Reason)
		}
	}
	return s
}

func direction(from, to string) string {
	a, errA := semver.Parse(from)
	b, errB := semver.Parse(to)
	switch {
	case errA != nil || errB != nil:
		return "change"
	case b.GT(a):
		return "upgrade; rolled back if not Ready within spec.upgradeTimeout"
	default:
		return "downgrade"
	}
}

// channelNames are the channel files of the embedded tree and --channels-dir.
func channelNames(src render.Channels) []string {
	var names []string
	for _, fsys := range []fs.FS{src.Dir, src.FS} {
		if fsys == nil {
			continue
		}
		entries, _ := fs.ReadDir(fsys, ".")
		for _, e := range entries {
			if e.IsDir() || strings.HasPrefix(e.Name(), ".") || strings.Contains(e.Name(), ".") {
				continue // channel names are lowercase letters (the CRD's pattern)
			}
			if !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return names
}

// channelVersions lists the versions of the package a channel file names,
// and which tree it comes from (--channels-dir wins, as in the operator).
func channelVersions(src render.Channels, name string) ([]string, string, error) {
	from := "embedded"
	raw, err := fs.ReadFile(orEmpty(src.Dir), name)
	if err == nil {
		from = "--channels-dir"
	} else {
		raw, err = fs.ReadFile(src.FS, name)
	}
	if err != nil {
		return nil, from, err
	}
	var ch struct {
		Manifests []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"manifests"`
	}
	if err := yaml.Unmarshal(raw, &ch); err != nil {
		return nil, from, err
	}
	var out []string
	for _, m := range ch.Manifests {
		if m.Name == render.PackageName {
			out = append(out, m.Version)
		}
	}
	return out, from, nil
}

// packageVersions lists the package versions of both trees, oldest first.
func packageVersions(src render.Channels) []string {
	var out []string
	for _, fsys := range []fs.FS{src.Dir, src.FS} {
		if fsys == nil {
			continue
		}
		dir := path.Join("packages", render.PackageName)
		entries, _ := fs.ReadDir(fsys, dir)
		for _, e := range entries {
			if _, err := fs.Stat(fsys, path.Join(dir, e.Name(), "kustomization.yaml")); err == nil && !slices.Contains(out, e.Name()) {
				out = append(out, e.Name())
			}
		}
	}
	slices.SortFunc(out, compareVersions)
	return out
}

// compareVersions orders versions by semver where both are, else as strings.
func compareVersions(a, b string) int {
	va, errA := semver.Parse(a)
	vb, errB := semver.Parse(b)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	return va.Compare(vb)
}

type emptyFS struct{}

func (emptyFS) Open(string) (fs.File, error) { return nil, fs.ErrNotExist }

func orEmpty(f fs.FS) fs.FS {
	if f == nil {
		return emptyFS{}
	}
	return f
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
