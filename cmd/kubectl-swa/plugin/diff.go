package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

const diffExample = `  # What applying web.yaml would change, as a unified diff
  kubectl swa diff -f web.yaml

  # What the operator would change now in the SimpleWebApps of namespace demo,
  # for example after a channel update (no output and exit code 0: nothing)
  kubectl get swa -n demo -o yaml | kubectl swa diff -f -

  # With another diff program, which gets a directory of live and one of
  # dry-run objects, as with kubectl diff
  KUBECTL_EXTERNAL_DIFF="meld" kubectl swa diff -f web.yaml`

func newDiffCommand(o *options) *cobra.Command {
	var in input
	cmd := &cobra.Command{
		Use:   "diff (-f FILENAME | -k DIRECTORY)",
		Short: "Show what applying SimpleWebApps would change, from a server-side dry-run",
		Long: `Show what applying each SimpleWebApp of the input would change in the cluster:
the SimpleWebApp itself (a dry-run of its spec), then each object the operator
would write, dry-run server-side-applied as the operator's field manager after
the operator's own checks (patch policy, security floor, ownership), then the
objects it would prune. Nothing is written.

The output is a unified diff of live against the dry-run result. When
KUBECTL_EXTERNAL_DIFF is set, as with kubectl diff, the live and the dry-run
objects are written to two directories instead and that program is run with
them (arguments after the program name are passed when made of letters,
digits, '-' and '=').

Exit status, as kubectl diff: 0 no differences, 1 differences, above 1 an error
or a refusal (with $KUBECTL_EXTERNAL_DIFF: its exit status).`,
		Example: diffExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.diff(cmd.Context(), &in)
		},
	}
	in.addFlags(cmd.Flags(), "diff")
	return cmd
}

// diff is `kubectl swa diff` (its help says what it shows).
func (o *options) diff(ctx context.Context, in *input) error {
	ns, explicit, err := o.namespace(false)
	if err != nil {
		return err
	}
	us, err := in.load(o.streams.In, o.streams.ErrOut, ns, explicit)
	if err != nil {
		return err
	}
	apps, err := typedAll(us)
	if err != nil {
		return err
	}
	cl, dyn, err := o.connect()
	if err != nil {
		return err
	}
	// Without an external program each diff is written as soon as it is
	// known, between the lines that say which version is rendered.
	program := os.Getenv("KUBECTL_EXTERNAL_DIFF")
	d := differ{cl: cl, dyn: dyn, src: in.source(), log: o.streams.ErrOut}
	if program == "" {
		d.out = o.streams.Out
	}
	for _, swa := range apps {
		if err := d.one(ctx, swa); err != nil {
			return fmt.Errorf("SimpleWebApp %s/%s: %w", swa.Namespace, swa.Name, err)
		}
	}
	code := 0
	if program != "" {
		if code, err = d.external(program, o.streams.Out); err != nil {
			return err
		}
	} else if d.changed {
		code = ExitChanges
	}
	if code != 0 {
		return exitCode(code)
	}
	return nil
}

type differ struct {
	cl  client.Client
	dyn dynamic.Interface
	src render.Channels
	log io.Writer
	// out gets the unified diffs; when nil the pairs are kept for an
	// external program.
	out     io.Writer
	pairs   []pair
	changed bool
}

// pair is an object live (nil: absent) and after the dry-run (nil: pruned).
type pair struct {
	before, after *unstructured.Unstructured
	note          string
}

// one adds the pairs of one SimpleWebApp.
func (d *differ) one(ctx context.Context, file *webappv1.SimpleWebApp) error {
	live, next, err := dryRunSimpleWebApp(ctx, d.cl, file)
	if err != nil {
		return err
	}
	var liveObj, nextObj *unstructured.Unstructured
	if live != nil {
		if liveObj, err = toUnstructured(live); err != nil {
			return err
		}
	}
	if nextObj, err = toUnstructured(next); err != nil {
		return err
	}
	if err := d.add(pair{before: liveObj, after: nextObj}); err != nil {
		return err
	}
	if next.Spec.Suspend {
		fmt.Fprintf(d.log, "SimpleWebApp %s/%s: spec.suspend is true: the operator writes none of its objects\n", next.Namespace, next.Name)
		return nil
	}

	rel, why, err := targetRelease(ctx, d.src, next)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.log, "SimpleWebApp %s/%s: version %s (%s)\n", next.Namespace, next.Name, rel.Version, why)
	rendered, err := render.Render(rel, next)
	if err != nil {
		return err
	}
	desired := apply.DesiredObjects(next, rendered)
	var keep []webappv1.ObjectReference
	for _, obj := range desired {
		gvk := obj.GroupVersionKind()
		keep = append(keep, webappv1.ObjectReference{Group: gvk.Group, Kind: gvk.Kind, Name: obj.GetName()})
		before, after, err := d.dryRunApply(ctx, next, obj)
		if err != nil {
			return err
		}
		if err := d.add(pair{before: before, after: after}); err != nil {
			return err
		}
	}
	// What the inventory holds and the render does not is pruned once the
	// new objects are rolled out.
	for _, ref := range next.Status.Inventory {
		if slices.Contains(keep, ref) {
			continue
		}
		obj, err := d.get(ctx, next.Namespace, ref)
		if err != nil {
			return err
		}
		if obj == nil || !metav1.IsControlledBy(obj, next) {
			continue
		}
		if err := d.add(pair{before: obj, note: " (pruned once the new objects are rolled out)"}); err != nil {
			return err
		}
	}
	return nil
}

// dryRunApply returns the live object (nil if none) and what the operator's
// write would make of it: a create when it does not exist (the operator
// never adopts), else a forced server-side apply as its field manager with
// the live UID as a precondition.
func (d *differ) dryRunApply(ctx context.Context, owner *webappv1.SimpleWebApp, obj *unstructured.Unstructured) (*unstructured.Unstructured, *unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := d.cl.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, nil, err
	}
	ri := d.dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		after, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: render.ManagerName, DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return nil, nil, refused(err, gvk.Kind, obj.GetName(), "create")
		}
		return nil, after, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if !metav1.IsControlledBy(live, owner) {
		return nil, nil, &step.Error{Reason: webappv1.ReasonObjectNotOwned, Terminal: true,
			Message: fmt.Sprintf("%s %s exists and is not controlled by this SimpleWebApp; it is left untouched (delete or rename it, or rename the SimpleWebApp)", gvk.Kind, obj.GetName())}
	}
	body := obj.DeepCopy()
	body.SetUID(live.GetUID())
	raw, err := body.MarshalJSON()
	if err != nil {
		return nil, nil, err
	}
	after, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, raw, metav1.PatchOptions{
		FieldManager: render.ManagerName, Force: ptr.To(true), DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, nil, refused(err, gvk.Kind, obj.GetName(), "apply")
	}
	return live, after, nil
}

// refused classifies the API server's answer as the operator does: a final
// refusal (forbidden, invalid) is ApplyRejected, with the server's message.
func refused(err error, kind, name, verb string) error {
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		var st apierrors.APIStatus
		msg := err.Error()
		if errors.As(err, &st) {
			msg = st.Status().Message
		}
		return &step.Error{Reason: webappv1.ReasonApplyRejected, Terminal: true,
			Message: fmt.Sprintf("%s %s: the API server refused the %s: %s: %s", kind, name, verb, apierrors.ReasonForError(err), msg)}
	}
	return fmt.Errorf("%s %s: %s: %w", kind, name, verb, err)
}

func (d *differ) get(ctx context.Context, ns string, ref webappv1.ObjectReference) (*unstructured.Unstructured, error) {
	mapping, err := d.cl.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.Group, Kind: ref.Kind})
	if err != nil {
		return nil, err
	}
	obj, err := d.dyn.Resource(mapping.Resource).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// add writes the unified diff of p if it differs, or keeps p for an
// external program.
func (d *differ) add(p pair) error {
	if d.out == nil {
		d.pairs = append(d.pairs, p)
		return nil
	}
	changed, err := writeUnifiedDiff(d.out, p, "live", "dry-run")
	d.changed = d.changed || changed
	return err
}

// writeUnifiedDiff writes the unified diff of p, its sides labelled from and
// to, when they differ, and reports whether they do.
func writeUnifiedDiff(out io.Writer, p pair, from, to string) (bool, error) {
	a, err := comparable(p.before)
	if err != nil {
		return false, err
	}
	b, err := comparable(p.after)
	if err != nil {
		return false, err
	}
	if a == b {
		return false, nil
	}
	obj, note := p.after, p.note
	if obj == nil {
		obj = p.before
	}
	if p.before == nil {
		note = " (created)"
	}
	name := fmt.Sprintf("%s/%s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(a), B: lines(b),
		FromFile: from + "/" + name, ToFile: to + "/" + name + note, Context: 3,
	})
	if err != nil {
		return true, err
	}
	_, err = io.WriteString(out, text)
	return true, err
}

// comparable is obj as YAML without what every write changes (managedFields,
// resourceVersion, generation, ...) and without status, which the operator
// does not write.
func comparable(obj *unstructured.Unstructured) (string, error) {
	if obj == nil {
		return "", nil
	}
	o := obj.DeepCopy()
	for _, f := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink"} {
		unstructured.RemoveNestedField(o.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(o.Object, "status")
	b, err := yaml.Marshal(o.Object)
	return string(b), err
}

func toUnstructured(swa *webappv1.SimpleWebApp) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(swa)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(webappv1.GroupVersion.WithKind("SimpleWebApp"))
	return u, nil
}

// lines splits s into lines; none for an absent object.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}
