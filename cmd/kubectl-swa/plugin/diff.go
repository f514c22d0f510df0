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

// diff shows what applying each SimpleWebApp of -f would change in the
// cluster: the SimpleWebApp itself (a dry-run update of its spec), then each
// object the operator would write, dry-run server-side-applied as the
// operator's field manager after the operator's own checks (patch policy,
// security floor, ownership), then the objects it would prune.
func diff(args []string, stdout, stderr io.Writer) (int, error) {
	var c common
	fs := newFlags("diff", &c, true)
	if err := parse(fs, args); err != nil {
		return ExitError, err
	}
	cl, dyn, ns, err := c.connectDynamic()
	if err != nil {
		return ExitError, err
	}
	apps, err := c.load(os.Stdin, ns)
	if err != nil {
		return ExitError, err
	}
	d := differ{cl: cl, dyn: dyn, src: c.source(), out: stdout, log: stderr}
	changed := false
	for _, swa := range apps {
		ch, err := d.one(context.Background(), swa)
		if err != nil {
			return ExitError, fmt.Errorf("SimpleWebApp %s/%s: %w", swa.Namespace, swa.Name, err)
		}
		changed = changed || ch
	}
	if changed {
		return ExitChanges, nil
	}
	return ExitOK, nil
}

type differ struct {
	cl       client.Client
	dyn      dynamic.Interface
	src      render.Channels
	out, log io.Writer
}

// one diffs one SimpleWebApp and reports whether anything would change.
func (d *differ) one(ctx context.Context, file *webappv1.SimpleWebApp) (bool, error) {
	live, next, err := dryRunSimpleWebApp(ctx, d.cl, file)
	if err != nil {
		return false, err
	}
	var liveObj, nextObj *unstructured.Unstructured
	if live != nil {
		if liveObj, err = toUnstructured(live); err != nil {
			return false, err
		}
	}
	if nextObj, err = toUnstructured(next); err != nil {
		return false, err
	}
	changed, err := d.show("SimpleWebApp", liveObj, nextObj, "")
	if err != nil {
		return false, err
	}
	if next.Spec.Suspend {
		fmt.Fprintf(d.log, "SimpleWebApp %s/%s: spec.suspend is true: the operator writes none of its objects\n", next.Namespace, next.Name)
		return changed, nil
	}

	rel, why, err := targetRelease(ctx, d.src, next)
	if err != nil {
		return changed, err
	}
	fmt.Fprintf(d.log, "SimpleWebApp %s/%s: version %s (%s)\n", next.Namespace, next.Name, rel.Version, why)
	rendered, err := render.Render(rel, next)
	if err != nil {
		return changed, err
	}
	desired := apply.DesiredObjects(next, rendered)
	var keep []webappv1.ObjectReference
	for _, obj := range desired {
		gvk := obj.GroupVersionKind()
		keep = append(keep, webappv1.ObjectReference{Group: gvk.Group, Kind: gvk.Kind, Name: obj.GetName()})
		before, after, err := d.dryRunApply(ctx, next, obj)
		if err != nil {
			return changed, err
		}
		ch, err := d.show(gvk.Kind, before, after, "")
		if err != nil {
			return changed, err
		}
		changed = changed || ch
	}
	// What the inventory holds and the render does not is pruned once the
	// new objects are rolled out.
	for _, ref := range next.Status.Inventory {
		if slices.Contains(keep, ref) {
			continue
		}
		obj, err := d.get(ctx, next.Namespace, ref)
		if err != nil {
			return changed, err
		}
		if obj == nil || !metav1.IsControlledBy(obj, next) {
			continue
		}
		if _, err := d.show(ref.Kind, obj, nil, " (pruned once the new objects are rolled out)"); err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
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

// show prints the unified diff of before and after (either may be nil) and
// reports whether they differ.
func (d *differ) show(kind string, before, after *unstructured.Unstructured, note string) (bool, error) {
	a, err := comparable(before)
	if err != nil {
		return false, err
	}
	b, err := comparable(after)
	if err != nil {
		return false, err
	}
	if a == b {
		return false, nil
	}
	obj := after
	if obj == nil {
		obj = before
	}
	if before == nil {
		note = " (created)"
	}
	name := fmt.Sprintf("%s/%s/%s", kind, obj.GetNamespace(), obj.GetName())
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(a), B: lines(b),
		FromFile: "live/" + name, ToFile: "dry-run/" + name + note, Context: 3,
	})
	if err != nil {
		return false, err
	}
	_, err = io.WriteString(d.out, text)
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
