package plugin

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/fleet"
	"example.com/simplewebapp-operator/internal/render"
)

// DefaultOperatorNamespace is where config/default and the Helm chart run
// the operator, and so where its roll-out states are.
const DefaultOperatorNamespace = "simplewebapp-system"

const planExample = `  # Which SimpleWebApps of the cluster a new channels tree would move, and
  # what changes in their objects (exit code 1: some would move)
  kubectl swa plan --channels-dir ./channels -A

  # One new channel file, for the SimpleWebApps of namespace demo
  kubectl swa plan --channel-file ./stable -n demo

  # A candidate file tried as channel rapid, as JSON
  kubectl swa plan --channel-file ./candidate.yaml --channel rapid -A -o json

  # Offline, from an export of the fleet (its status says what runs)
  kubectl get swa -A -o yaml > fleet.yaml
  kubectl swa plan --channels-dir ./channels -f fleet.yaml`

// planOptions are plan's flags.
type planOptions struct {
	in            input
	channelFile   string
	channel       string
	allNamespaces bool
	selector      string
	operatorNS    string
	output        string
}

func newPlanCommand(o *options) *cobra.Command {
	p := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan (--channels-dir DIRECTORY | --channel-file FILE [--channel NAME]) [-n NAMESPACE | -A] [-f FILENAME | -k DIRECTORY]",
		Short: "Show which SimpleWebApps new channels would move, grouped, with a diff per group",
		Long: `Show what shipping new channels would do to the fleet before they are shipped:
for each SimpleWebApp, the version it runs (status.version) and the version the
reconciler would apply with the new channels (the channel's newest version,
withdrawn and halted versions passed over, a version rolled back for the same
spec and channel held back), from the operator's own code.

The new channels are the embedded tree with --channels-dir laid over it, as the
operator's --channels-dir, or with one channel file (--channel-file) laid over
it under the name --channel (default: the file's name), which can then name
only versions the embedded tree holds. Versions the operator
halted for the fleet are read from its roll-out states (ConfigMaps labelled
simplewebapp.example.com/rollout=true in --operator-namespace); without the
right to read them plan says so on stderr and goes on without them.

The moves are grouped by old version, new version and spec shape: the
optional spec fields set to other than their default, besides replicas and
message (for example "image,patches"; <none> for a plain SimpleWebApp). For one
example of each group plan prints the unified diff of the objects rendered for
the old and the new version. Then it counts the SimpleWebApps that stay, and
lists those held by a halted version, those suspended and those the
reconciler would stall on. The SimpleWebApps are read from the cluster (-n, or
-A), or with -f or -k from files, whose status is taken for the live one.
Nothing is written, not even a dry-run.

Plan shows where each SimpleWebApp would end up, not when: the operator moves
them in waves, as upgrade slots free up, and stops where a version halts.

Exit status, as diff: 0 nothing would move, 1 something would, 2 an error.`,
		Example: planExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.check(); err != nil {
				return err
			}
			return o.plan(cmd.Context(), p)
		},
	}
	flags := cmd.Flags()
	p.in.addFlags(flags, "plan for, instead of those of the cluster")
	flags.StringVar(&p.channelFile, "channel-file", "", "One channel file laid over the embedded tree, under the name --channel.")
	flags.StringVar(&p.channel, "channel", "", "The channel --channel-file stands for (default: the file's name).")
	flags.BoolVarP(&p.allNamespaces, "all-namespaces", "A", false, "Plan for the SimpleWebApps of every namespace.")
	flags.StringVarP(&p.selector, "selector", "l", "", "Only the SimpleWebApps with these labels (a label selector, as for kubectl get).")
	flags.StringVar(&p.operatorNS, "operator-namespace", DefaultOperatorNamespace, "The operator's namespace, where its roll-out states are.")
	flags.StringVarP(&p.output, "output", "o", "", "Output format. One of: (json, yaml). Default: a table and diffs.")
	cmd.MarkFlagsMutuallyExclusive("channels-dir", "channel-file")
	cmd.MarkFlagsOneRequired("channels-dir", "channel-file")
	return cmd
}

// channelName is what a channel file may be called: the CRD's pattern for
// spec.channel.
var channelName = regexp.MustCompile(`^[a-z]+$`)

// check refuses flags that do not go together.
func (p *planOptions) check() error {
	switch {
	case p.output != "" && p.output != "json" && p.output != "yaml":
		return fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: json, yaml", p.output)
	case p.channel != "" && p.channelFile == "":
		return errors.New("--channel names the channel of --channel-file: give both")
	case p.allNamespaces && p.in.given():
		return errors.New("-A lists the SimpleWebApps of the cluster: not with -f or -k")
	}
	if p.channelFile != "" && p.channel == "" {
		p.channel = filepath.Base(p.channelFile)
	}
	if p.channelFile != "" && !channelName.MatchString(p.channel) {
		return fmt.Errorf("%q is no channel name (lowercase letters only): name the channel of --channel-file with --channel", p.channel)
	}
	return nil
}

// channels are the channels after the change, checked: every channel they
// add resolves to a package version.
func (p *planOptions) channels(ctx context.Context) (render.Channels, error) {
	if p.channelFile != "" {
		if _, err := os.Stat(p.channelFile); err != nil {
			return render.Channels{}, fmt.Errorf("--channel-file: %w", err)
		}
		src := render.Channels{FS: channels.FS, Dir: channelFileFS{name: p.channel, path: p.channelFile}}
		if _, err := src.Resolve(ctx, webappv1.SimpleWebAppSpec{Channel: p.channel}); err != nil {
			// Not %w: the flag is wrong, the reconciler refuses nothing yet.
			return src, fmt.Errorf("--channel-file %s (channel %s): %s", p.channelFile, p.channel, err)
		}
		return src, nil
	}
	if fi, err := os.Stat(p.in.channelsDir); err != nil || !fi.IsDir() {
		return render.Channels{}, fmt.Errorf("--channels-dir %s is no directory (%v)", p.in.channelsDir, err)
	}
	src := p.in.source()
	for _, ch := range channelNames(render.Channels{Dir: src.Dir}) {
		if _, err := src.Resolve(ctx, webappv1.SimpleWebAppSpec{Channel: ch}); err != nil {
			return src, fmt.Errorf("channel %s of --channels-dir: %s", ch, err)
		}
	}
	if _, err := src.Withdrawals(); err != nil {
		return src, fmt.Errorf("--channels-dir: %s", err)
	}
	return src, nil
}

// channelFileFS is a channels tree of one file, read from path, under name.
type channelFileFS struct{ name, path string }

func (c channelFileFS) Open(name string) (fs.File, error) {
	if name != c.name {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return os.Open(c.path)
}

// planReport is what plan found.
type planReport struct {
	Moves []planMove `json:"moves"`
	// Stays are the SimpleWebApps that keep their version, those held by a
	// halt aside.
	Stays []string `json:"stays"`
	// HeldByHalt are the SimpleWebApps whose channel's newest version is
	// halted for the fleet: they stay, or move to an older version.
	HeldByHalt []planHeld  `json:"heldByHalt,omitempty"`
	Suspended  []string    `json:"suspended,omitempty"`
	Stalled    []planStall `json:"stalled,omitempty"`
	Halts      planHalts   `json:"halts"`
}

// planMove is one group of moves: the same old and new version and spec
// shape.
type planMove struct {
	From  string   `json:"from"`
	To    string   `json:"to"`
	Shape string   `json:"shape"`
	Count int      `json:"count"`
	Apps  []string `json:"apps"`
	// Example is the app Diff is of.
	Example string `json:"example"`
	Diff    string `json:"diff,omitempty"`
	// DiffError is why there is no diff: the example's render failed (the
	// reconciler would stall it as well).
	DiffError string `json:"diffError,omitempty"`
}

type planHeld struct {
	App     string `json:"app"`
	Running string `json:"running"`
	// Version is what it would run: Running, or an older version than the
	// halted one.
	Version string `json:"version"`
	Halted  string `json:"halted"`
	Reason  string `json:"reason"`
}

type planStall struct {
	App     string `json:"app"`
	Running string `json:"running"`
	Reason  string `json:"reason"`
}

// planHalts says where the halted versions were read from, and which.
type planHalts struct {
	Namespace string `json:"namespace,omitempty"`
	// Read is false when the states were not read (offline, forbidden).
	Read   bool         `json:"read"`
	Note   string       `json:"note,omitempty"`
	Halted []planHalted `json:"halted,omitempty"`
	// states are what ResolveApp asks.
	states fleet.Halts
}

type planHalted struct {
	Version string      `json:"version"`
	Content string      `json:"content"`
	At      metav1.Time `json:"at"`
	Reason  string      `json:"reason"`
}

// plan is `kubectl swa plan` (its help says what it shows).
func (o *options) plan(ctx context.Context, p *planOptions) error {
	src, err := p.channels(ctx)
	if err != nil {
		return err
	}
	sel, err := labels.Parse(p.selector)
	if err != nil {
		return err
	}
	validator, err := newCRDValidator()
	if err != nil {
		return err
	}
	r := &planReport{Moves: []planMove{}, Stays: []string{}}
	var apps []*webappv1.SimpleWebApp
	if p.in.given() {
		if apps, err = o.appsOfFiles(&p.in, validator); err != nil {
			return err
		}
		r.Halts = planHalts{Note: "not read: offline (-f, -k)"}
	} else {
		ns := ""
		if !p.allNamespaces {
			if ns, _, err = o.namespace(false); err != nil {
				return err
			}
		}
		cl, _, err := o.connect()
		if err != nil {
			return err
		}
		if apps, err = listSimpleWebApps(ctx, cl, ns, sel); err != nil {
			return err
		}
		if r.Halts, err = o.readHalts(ctx, cl, p.operatorNS); err != nil {
			return err
		}
		if r.Halts.states != nil {
			src.Halts = r.Halts.states
		}
	}
	defaults, err := specDefaults(validator)
	if err != nil {
		return err
	}
	groups := map[[3]string]*planMove{}
	slices.SortFunc(apps, func(a, b *webappv1.SimpleWebApp) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for _, swa := range apps {
		name := swa.Namespace + "/" + swa.Name
		running := swa.Status.Version
		switch {
		case !sel.Matches(labels.Set(swa.Labels)), !swa.DeletionTimestamp.IsZero():
			continue
		case swa.Spec.Suspend:
			// The reconciler writes nothing while it is suspended.
			r.Suspended = append(r.Suspended, name)
			continue
		}
		rel, _, err := targetRelease(ctx, src, swa)
		if err != nil {
			r.Stalled = append(r.Stalled, planStall{App: name, Running: running, Reason: oneLine(err.Error())})
			continue
		}
		if h := rel.Halted; h != nil {
			r.HeldByHalt = append(r.HeldByHalt, planHeld{App: name, Running: running, Version: rel.Version, Halted: h.Version, Reason: h.Reason})
		}
		switch {
		case rel.Version == running && rel.Halted != nil:
			continue // held
		case rel.Version == running:
			r.Stays = append(r.Stays, name)
			continue
		}
		shape, err := shapeOf(swa, defaults)
		if err != nil {
			return err
		}
		key := [3]string{running, rel.Version, shape}
		g := groups[key]
		if g == nil {
			g = &planMove{From: running, To: rel.Version, Shape: shape, Example: name}
			groups[key] = g
			// The example's diff, while rel is at hand.
			var diff bytes.Buffer
			if err := renderedDiff(ctx, &diff, src, swa, running, rel); err != nil {
				g.DiffError = oneLine(err.Error())
			}
			g.Diff = diff.String()
		}
		g.Count++
		g.Apps = append(g.Apps, name)
	}
	for _, g := range groups {
		r.Moves = append(r.Moves, *g)
	}
	slices.SortFunc(r.Moves, func(a, b planMove) int {
		return cmp.Or(compareVersions(a.From, b.From), compareVersions(a.To, b.To), strings.Compare(a.Shape, b.Shape))
	})
	if p.output != "" {
		err = printData(o.streams.Out, p.output, r)
	} else {
		err = r.print(o.streams.Out)
	}
	if err != nil {
		return err
	}
	if len(r.Moves) > 0 {
		return exitCode(ExitChanges)
	}
	return nil
}

// appsOfFiles are the SimpleWebApps of -f and -k as the API server stores
// them (with the CRD's defaults), their status as written.
func (o *options) appsOfFiles(in *input, validator *crdValidator) ([]*webappv1.SimpleWebApp, error) {
	ns, explicit, _ := o.namespace(true)
	us, err := in.load(o.streams.In, o.streams.ErrOut, ns, explicit)
	if err != nil {
		return nil, err
	}
	for i, u := range us {
		us[i] = validator.withDefaults(u)
	}
	return typedAll(us)
}

// listPage bounds how many SimpleWebApps one answer of the API server holds.
const listPage = 500

// listSimpleWebApps lists the SimpleWebApps of ns ("" for all) that sel
// selects, page by page.
func listSimpleWebApps(ctx context.Context, cl client.Client, ns string, sel labels.Selector) ([]*webappv1.SimpleWebApp, error) {
	var out []*webappv1.SimpleWebApp
	cont := ""
	for {
		var list webappv1.SimpleWebAppList
		if err := cl.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel},
			client.Limit(listPage), client.Continue(cont)); err != nil {
			return nil, err
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		if cont = list.Continue; cont == "" {
			return out, nil
		}
	}
}

// rolloutStates lists the operator's roll-out state ConfigMaps in ns.
func rolloutStates(ctx context.Context, cl client.Client, ns string) ([]corev1.ConfigMap, error) {
	var cms corev1.ConfigMapList
	err := cl.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{fleet.StateLabel: "true"})
	return cms.Items, err
}

// readHalts reads the halted versions from the roll-out states in ns with
// the user's rights: without the right to list them, or without the
// namespace, there are none to honour, and plan says why.
func (o *options) readHalts(ctx context.Context, cl client.Client, ns string) (planHalts, error) {
	h := planHalts{Namespace: ns}
	cms, err := rolloutStates(ctx, cl, ns)
	switch {
	case apierrors.IsForbidden(err):
		h.Note = "not read: forbidden"
		fmt.Fprintf(o.streams.ErrOut, "warning: you may not list the roll-out states (ConfigMaps) in namespace %s: planning without the versions the operator halted (%s)\n",
			ns, oneLine(apiMessage(err)))
		return h, nil
	case apierrors.IsNotFound(err):
		h.Read, h.Note = true, "no namespace "+ns
		return h, nil
	case err != nil:
		return h, fmt.Errorf("listing the roll-out states in namespace %s: %w", ns, err)
	}
	h.Read = true
	states := fleet.States(cms)
	h.states = fleet.Halts(states)
	for _, st := range states {
		if st.Halted != nil {
			h.Halted = append(h.Halted, planHalted{Version: st.Key.Version, Content: st.Key.Hash, At: st.Halted.At, Reason: st.Halted.Reason})
		}
	}
	slices.SortFunc(h.Halted, func(a, b planHalted) int {
		return cmp.Or(compareVersions(a.Version, b.Version), strings.Compare(a.Content, b.Content))
	})
	return h, nil
}

// apiMessage is the API server's message of err.
func apiMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return st.Status().Message
	}
	return err.Error()
}

// specDefaults is an empty spec with the CRD's defaults, as shapeOf reads
// specs: through the Go type, so a default compares equal to the value the
// API server stored for it.
func specDefaults(v *crdValidator) (map[string]any, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": webappv1.GroupVersion.String(), "kind": "SimpleWebApp",
		"metadata": map[string]any{"name": "defaults"}, "spec": map[string]any{},
	}}
	swa, err := typed(v.withDefaults(u))
	if err != nil {
		return nil, err
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(&swa.Spec)
}

// shapeOf is the spec shape of swa: the names of the optional spec fields it
// sets to other than their default, besides replicas and message, sorted and
// joined by commas; "" for a plain SimpleWebApp.
func shapeOf(swa *webappv1.SimpleWebApp, defaults map[string]any) (string, error) {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&swa.Spec)
	if err != nil {
		return "", err
	}
	var names []string
	for field, v := range spec {
		if d, ok := defaults[field]; field == "replicas" || field == "message" || ok && reflect.DeepEqual(d, v) {
			continue
		}
		names = append(names, field)
	}
	slices.Sort(names)
	return strings.Join(names, ","), nil
}

// renderedDiff writes the unified diff of the objects rendered for swa at
// version from (none when "") and those of to, each with its hand-off fields,
// as `kubectl swa render -o` prints them. The old version is read from the
// same trees as the new one.
func renderedDiff(ctx context.Context, out io.Writer, src render.Channels, swa *webappv1.SimpleWebApp, from string, to render.Release) error {
	var before []*unstructured.Unstructured
	fromLabel := from
	if from == "" {
		fromLabel = "none"
	} else {
		old, err := src.Resolve(ctx, webappv1.SimpleWebAppSpec{Version: from})
		if err != nil {
			return fmt.Errorf("the running version: %w", err)
		}
		r, err := render.Render(old, swa)
		if err != nil {
			return fmt.Errorf("rendering the running version %s: %w", from, err)
		}
		before = withHandoffs(r)
	}
	r, err := render.Render(to, swa)
	if err != nil {
		return fmt.Errorf("rendering %s: %w", to.Version, err)
	}
	after := withHandoffs(r)
	old := map[string]*unstructured.Unstructured{}
	for _, obj := range before {
		old[render.Identity(obj)] = obj
	}
	for _, obj := range after {
		id := render.Identity(obj)
		if _, err := writeUnifiedDiff(out, pair{before: old[id], after: obj}, fromLabel, to.Version); err != nil {
			return err
		}
		delete(old, id)
	}
	for _, obj := range before {
		if old[render.Identity(obj)] == nil {
			continue
		}
		if _, err := writeUnifiedDiff(out, pair{before: obj, note: " (removed)"}, fromLabel, to.Version); err != nil {
			return err
		}
	}
	return nil
}

func withHandoffs(r *render.Rendered) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(r.Objects))
	for _, obj := range r.Objects {
		out = append(out, r.WithHandoff(obj))
	}
	return out
}

// print writes r for people: the moves as a table, the rest as lines, then
// the diff of each group's example.
func (r *planReport) print(out io.Writer) error {
	moving := 0
	if len(r.Moves) == 0 {
		fmt.Fprintln(out, "No SimpleWebApp would move.")
	} else {
		table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Old", Type: "string"}, {Name: "New", Type: "string"}, {Name: "Shape", Type: "string"},
			{Name: "Count", Type: "integer"}, {Name: "Example", Type: "string"},
		}}
		for _, g := range r.Moves {
			moving += g.Count
			table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{orNone(g.From), g.To, orNone(g.Shape), int64(g.Count), g.Example}})
		}
		if err := printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(table, out); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\n%d would move, %d stay, %d held by a halt, %d suspended, %d would stall.\n",
		moving, len(r.Stays), len(r.HeldByHalt), len(r.Suspended), len(r.Stalled))
	for _, h := range r.HeldByHalt {
		what := "stays at " + h.Version
		if h.Version != h.Running {
			what = fmt.Sprintf("moves to %s instead", h.Version)
		}
		fmt.Fprintf(out, "HELD %s: %s; %s\n", h.App, what, h.Reason)
	}
	for _, name := range r.Suspended {
		fmt.Fprintf(out, "SUSPENDED %s\n", name)
	}
	for _, s := range r.Stalled {
		fmt.Fprintf(out, "STALL %s: %s\n", s.App, s.Reason)
	}
	switch {
	case r.Halts.Note != "":
		fmt.Fprintf(out, "Halted versions: %s.\n", r.Halts.Note)
	case len(r.Halts.Halted) == 0:
		fmt.Fprintf(out, "Halted versions (namespace %s): none.\n", r.Halts.Namespace)
	}
	for _, h := range r.Halts.Halted {
		fmt.Fprintf(out, "HALTED %s (content %s) since %s: %s\n", h.Version, h.Content, h.At.UTC().Format("2006-01-02T15:04:05Z"), h.Reason)
	}
	for _, g := range r.Moves {
		fmt.Fprintf(out, "\n# %s -> %s, shape %s: %d like %s\n", orNone(g.From), g.To, orNone(g.Shape), g.Count, g.Example)
		if g.DiffError != "" {
			fmt.Fprintf(out, "# no diff: %s\n", g.DiffError)
		}
		if _, err := io.WriteString(out, g.Diff); err != nil {
			return err
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
