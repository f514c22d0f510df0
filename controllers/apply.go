package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// AnnotationAppliedHash records a hash of what the operator last wrote to an
// object. With the live object from the cache it decides, without a request,
// whether the object needs a write (see Applier).
const AnnotationAppliedHash = "simplewebapp.example.com/applied-hash"

// HandoffManager is the field manager of the handoff fields. A separate
// manager lets the operator release them: server-side apply deletes a field
// that its only manager stops applying, but not one that a manager that no
// longer applies still co-owns.
const HandoffManager = ManagerName + "-handoff"

// Applier writes a render to the cluster and does only the writes that
// change something. For each rendered object it compares, from the cache:
//   - the applied-hash annotation with the hash of the desired object (the
//     render changed: apply, which also removes fields the render dropped);
//   - every desired field with the live one (a hand edit: apply, forced);
//   - the field managers: a foreign manager owning fields that matter for
//     security or exposure (an added container, volume, hostNetwork,
//     externalIPs, ...) has its fields taken over, and the next apply removes
//     them.
//
// Nothing differs: no request at all, also after a restart. Objects that do
// not exist are created with a POST, which fails if an object of that name
// exists: the operator never adopts what it did not create. Existing objects
// are server-side-applied with their UID as a precondition.
type Applier struct {
	// Client reads the cache; it holds only managed objects.
	Client client.Client
	// APIReader reads uncached, only on the rare paths (a name taken, a
	// take-over of field managers).
	APIReader client.Reader
	Dynamic   dynamic.Interface
	Mapper    meta.RESTMapper

	// written remembers the resourceVersion of the operator's last write of
	// each object, to tell a cache that is behind it from a change.
	mu      sync.Mutex
	written map[objectKey]write
	fights  fights
}

// write is the operator's last write of an object.
type write struct {
	resourceVersion uint64
	at              time.Time
}

// cacheLag is how long an object the operator wrote may be missing from the
// cache before it counts as gone (its watch event was lost or it was
// deleted before the cache saw it).
const cacheLag = 30 * time.Second

// NewApplier returns an Applier.
func NewApplier(c client.Client, apiReader client.Reader, d dynamic.Interface, m meta.RESTMapper) *Applier {
	return &Applier{Client: c, APIReader: apiReader, Dynamic: d, Mapper: m, written: map[objectKey]write{}}
}

type objectKey struct {
	Group, Kind, Namespace, Name string
}

func keyOf(o client.Object, gvkGroup, gvkKind string) objectKey {
	return objectKey{gvkGroup, gvkKind, o.GetNamespace(), o.GetName()}
}

// applied is what an Apply did and saw.
type applied struct {
	// workload is the live Deployment: as the write returned it, else cached.
	workload *appsv1.Deployment
	// writes counts the requests that changed objects.
	writes int
	// takenOver describes the foreign field managers whose fields were taken
	// over (and so removed), for an event.
	takenOver []string
}

// Apply makes the cluster hold r for swa. force applies every object even
// when nothing seems to differ (a requested reconcile).
//
// The objects go in two waves: first what the workload reads when its pods
// start (ConfigMaps: ManagedKind.ReadByWorkload), so that they never start
// without their volumes; then everything else (the Deployment, the Service,
// ...). The writes of one wave are independent and run in parallel: a new
// SimpleWebApp's objects cost two round trips, not one per object. The
// Service is in the second wave because its create is the slowest (the API
// server's cluster-IP allocator takes one Service at a time) and nothing
// waits for it. The first error (in render order) is returned, and a wave
// with an error stops the next.
func (a *Applier) Apply(ctx context.Context, swa *webappv1.SimpleWebApp, r *Rendered, force bool) (applied, error) {
	var res applied
	id := applySetID(swa)
	var first, rest []*unstructured.Unstructured
	for _, o := range r.Objects {
		if k, ok := managedKind(o.GroupVersionKind()); ok && k.ReadByWorkload {
			first = append(first, o)
		} else {
			rest = append(rest, o)
		}
	}
	for _, wave := range [][]*unstructured.Unstructured{first, rest} {
		results := make([]applied, len(wave))
		errs := make([]error, len(wave))
		var wg sync.WaitGroup
		for i, o := range wave {
			var partial *unstructured.Unstructured
			for _, h := range r.Handoffs {
				if identity(h) == identity(o) {
					partial = h
				}
			}
			handoffPaths := r.HandoffFields[identity(o)]
			ensure := func() {
				live, err := a.ensure(ctx, swa, desired(swa, o, id), partial, handoffPaths, force, &results[i])
				if d, ok := live.(*appsv1.Deployment); ok {
					results[i].workload = d
				}
				errs[i] = err
			}
			if len(wave) == 1 {
				ensure()
				continue
			}
			wg.Go(ensure)
		}
		wg.Wait()
		for i := range wave {
			res.writes += results[i].writes
			res.takenOver = append(res.takenOver, results[i].takenOver...)
			if results[i].workload != nil {
				res.workload = results[i].workload
			}
		}
		for _, err := range errs {
			if err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// DesiredObjects are the objects of r as the operator writes them for swa,
// each with its handoff fields when they are applied (`kubectl swa diff`
// dry-runs exactly these).
func DesiredObjects(swa *webappv1.SimpleWebApp, r *Rendered) []*unstructured.Unstructured {
	id := applySetID(swa)
	out := make([]*unstructured.Unstructured, 0, len(r.Objects))
	for _, o := range r.Objects {
		d := desired(swa, o, id)
		for _, h := range r.Handoffs {
			if identity(h) == identity(o) {
				d = withFields([]*unstructured.Unstructured{d}, h)[0]
			}
		}
		out = append(out, d)
	}
	return out
}

// desired is o as the operator writes it: owned by swa (a controller
// reference, so the garbage collector removes it with swa), labelled as a
// member of swa's ApplySet, and with the hash of all that.
func desired(swa *webappv1.SimpleWebApp, o *unstructured.Unstructured, applySet string) *unstructured.Unstructured {
	d := o.DeepCopy()
	d.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(swa, webappv1.GroupVersion.WithKind("SimpleWebApp"))})
	labels := d.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelApplySetPartOf] = applySet
	d.SetLabels(labels)
	ann := d.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationAppliedHash] = hashOf(d.Object)
	d.SetAnnotations(ann)
	return d
}

func hashOf(v any) string {
	b, _ := json.Marshal(v) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ensure makes one object match desired (and its handoff fields partial) and
// returns it as it is now. handoffPaths are the object's handoff fields,
// handed off or not (Rendered.HandoffFields).
func (a *Applier) ensure(ctx context.Context, swa *webappv1.SimpleWebApp, desired, partial *unstructured.Unstructured, handoffPaths []string, force bool, res *applied) (client.Object, error) {
	gvk := desired.GroupVersionKind()
	kind, ok := managedKind(gvk)
	if !ok { // the floor refuses these before apply; this is a second check
		return nil, stalled(webappv1.ReasonPolicyViolation, "%s is not a managed kind", gvk)
	}
	key := objectKey{gvk.Group, gvk.Kind, desired.GetNamespace(), desired.GetName()}
	live := kind.New()
	err := a.Client.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		if a.wrote(key) {
			// Written by us and not yet in the cache (a delete would have
			// made us forget it): the watch event is on its way.
			return nil, nil
		}
		return a.create(ctx, swa, key, desired, partial, res)
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(live, swa) {
		return nil, stalled(webappv1.ReasonObjectNotOwned, "%s %s exists and is not controlled by this SimpleWebApp; it is left untouched (delete or rename it, or rename the SimpleWebApp)", gvk.Kind, desired.GetName())
	}
	if a.behind(key, live) {
		return live, nil
	}
	liveU, err := toUnstructured(live)
	if err != nil {
		return nil, err
	}
	changed := liveU.GetAnnotations()[AnnotationAppliedHash] != desired.GetAnnotations()[AnnotationAppliedHash]
	drifted := !contains(liveU.Object, desired.Object) || len(foreignSensitiveFields(live.GetManagedFields())) > 0
	needs := force || changed || drifted
	// The handoff fields are written when they differ. Who owns them does
	// not matter until an apply would drop them: the take-over below gives
	// the create's copy to HandoffManager (takeOverPatch).
	partialNeeded := partial != nil && (force || !contains(liveU.Object, partial.Object))
	if !needs && !partialNeeded {
		a.fights.settled(key, time.Now())
		return live, nil
	}
	var fightErr error
	if drifted && !changed && !force {
		// Someone changed what we wrote: correct it, unless they keep
		// doing so, then with backoff.
		ok, err := a.fights.correct(key, gvk.Kind, desired.GetName(), lastForeignManager(live.GetManagedFields()), time.Now())
		if !ok {
			return nil, err
		}
		fightErr = err
	}
	mapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	ri := a.Dynamic.Resource(mapping.Resource).Namespace(desired.GetNamespace())
	var out *unstructured.Unstructured
	if partialNeeded {
		// Before the main apply: the handoff manager must co-own the fields
		// before ManagerName may stop applying them.
		if out, err = a.apply(ctx, ri, partial, live.GetUID(), HandoffManager); err != nil {
			return nil, err
		}
		res.writes++
	}
	if needs {
		// Apply first: if the API server refuses it, nothing was written.
		if out, err = a.apply(ctx, ri, desired, live.GetUID(), ManagerName); err != nil {
			return nil, err
		}
		res.writes++
		if leftover(out.GetManagedFields()) {
			// Fields of foreign managers, or of our own create, that this
			// apply did not cover: take them over, and apply again so that
			// what the render lacks is removed.
			taken, err := a.takeOver(ctx, ri, out, handoffPaths)
			if err != nil {
				return nil, err
			}
			res.takenOver = append(res.takenOver, taken...)
			if out, err = a.apply(ctx, ri, desired, live.GetUID(), ManagerName); err != nil {
				return nil, err
			}
			res.writes += 2
		}
	}
	a.remember(key, out)
	if fightErr != nil {
		return nil, fightErr
	}
	written, err := fromUnstructured(out, kind)
	if d, ok := written.(*appsv1.Deployment); ok {
		observedIfMetadataOnly(live.(*appsv1.Deployment), d)
	}
	return written, err
}

// observedIfMetadataOnly: a write that changed only a Deployment's metadata
// (the applied-hash annotation, a label) still bumps its generation (the API
// server does so for annotations, which the Deployment controller copies to
// ReplicaSets), but rolls nothing. If the Deployment controller had observed
// the generation before the write, its status still describes the pods: the
// written copy is marked observed, so that status does not say "waiting for
// the Deployment controller" (Ready=False) for a roll-out that never
// happens, as an operator upgrade that adds an annotation would.
//
// The cached copy still reads "not observed" until the controller catches up
// (a moment); a pass that reads it then waits for the status batch instead
// of writing Ready=False (Reconcile, awaitingObservation).
func observedIfMetadataOnly(before, written *appsv1.Deployment) bool {
	if written == nil || before == nil || before.Status.ObservedGeneration != before.Generation ||
		written.Generation == before.Generation || !equality.Semantic.DeepEqual(before.Spec, written.Spec) {
		return false
	}
	written.Status.ObservedGeneration = written.Generation
	return true
}

// create POSTs desired with its handoff fields: it fails if the name is taken,
// so nothing is adopted. The create's entry owns the handoff fields until the
// first apply that changes the object takes them over for HandoffManager
// (takeOverPatch): one write per new object, where a handoff apply right
// after the create was a second, sequential one.
func (a *Applier) create(ctx context.Context, swa *webappv1.SimpleWebApp, key objectKey, desired, partial *unstructured.Unstructured, res *applied) (client.Object, error) {
	gvk := desired.GroupVersionKind()
	kind, _ := managedKind(gvk)
	body := desired
	if partial != nil {
		body = withFields([]*unstructured.Unstructured{desired}, partial)[0]
	}
	out, err := a.post(ctx, kind, body)
	if apierrors.IsAlreadyExists(err) {
		existing := kind.New()
		if err := a.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
			return nil, objectError(err, gvk.Kind, desired.GetName(), "read")
		}
		if metav1.IsControlledBy(existing, swa) {
			return nil, errStaleRead // ours; the cache has not seen it yet
		}
		return nil, stalled(webappv1.ReasonObjectNotOwned, "%s %s exists and is not controlled by this SimpleWebApp; it is left untouched (delete or rename it, or rename the SimpleWebApp)", gvk.Kind, desired.GetName())
	}
	if err != nil {
		return nil, objectError(err, gvk.Kind, desired.GetName(), "create")
	}
	res.writes++
	a.remember(key, out)
	return out, nil
}

// post creates body as ManagerName. A body that converts to its Go type
// exactly goes through the typed client, as protobuf: the API server decodes
// and encodes it for a fraction of the CPU that JSON costs it (and the
// operator decodes the answer once, where JSON came back as a map to
// convert). A body with fields this build's types do not know (a package
// for a newer Kubernetes) goes as JSON, whole.
func (a *Applier) post(ctx context.Context, kind ManagedKind, body *unstructured.Unstructured) (client.Object, error) {
	typed := kind.New()
	if runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(body.Object, typed, true) == nil {
		if err := a.Client.Create(ctx, typed, client.FieldOwner(ManagerName)); err != nil {
			return nil, err
		}
		return typed, nil
	}
	gvk := body.GroupVersionKind()
	mapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	out, err := a.Dynamic.Resource(mapping.Resource).Namespace(body.GetNamespace()).Create(ctx, body, metav1.CreateOptions{FieldManager: ManagerName})
	if err != nil {
		return nil, err
	}
	return fromUnstructured(out, kind)
}

// apply server-side-applies obj as manager, forcing conflicts (hand edits are
// reverted), with uid as a precondition: a different object of the same name
// is never written.
func (a *Applier) apply(ctx context.Context, ri dynamic.ResourceInterface, obj *unstructured.Unstructured, uid types.UID, manager string) (*unstructured.Unstructured, error) {
	body := obj.DeepCopy()
	body.SetUID(uid)
	raw, err := body.MarshalJSON()
	if err != nil {
		return nil, err
	}
	out, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, raw, metav1.PatchOptions{FieldManager: manager, Force: ptr.To(true)})
	if err != nil {
		return nil, objectError(err, obj.GetKind(), obj.GetName(), "apply")
	}
	return out, nil
}

// wrote reports whether the operator wrote the object and has not seen it
// deleted since.
func (a *Applier) wrote(key objectKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.written[key]
	return ok && time.Since(w.at) < cacheLag
}

// behind reports whether the cached live object is older than the operator's
// own last write of it: the cache has not caught up, and its watch event
// will wake the reconciler again.
func (a *Applier) behind(key objectKey, live client.Object) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.written[key]
	if !ok {
		return false
	}
	rv, err := strconv.ParseUint(live.GetResourceVersion(), 10, 64)
	return err == nil && rv < w.resourceVersion
}

// remember records a write's resourceVersion; out is what the write returned
// (never nil: callers remember only after a write).
func (a *Applier) remember(key objectKey, out client.Object) {
	if out == nil {
		return
	}
	rv, err := strconv.ParseUint(out.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.written[key] = write{resourceVersion: rv, at: time.Now()}
}

// Forget drops what the Applier remembers of an object (it was deleted).
func (a *Applier) Forget(group, kind, namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.written, objectKey{group, kind, namespace, name})
}

// withFields returns objs with the object that partial names replaced by a
// copy that also holds partial's fields.
func withFields(objs []*unstructured.Unstructured, partial *unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	copy(out, objs)
	for i, o := range out {
		if o.GetName() == partial.GetName() && o.GroupVersionKind() == partial.GroupVersionKind() {
			merged := o.DeepCopy()
			merge(merged.Object, partial.DeepCopy().Object)
			out[i] = merged
		}
	}
	return out
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// contains reports whether every field of want has the same value in live
// (live may hold more: defaults, status). Lists must have the same elements
// in the same order. Numbers compare by value.
func contains(live, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return len(w) == 0 && live == nil
		}
		for k, wv := range w {
			if !contains(l[k], wv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok {
			return len(w) == 0 && live == nil
		}
		if len(l) != len(w) {
			return false
		}
		for i := range w {
			if !contains(l[i], w[i]) {
				return false
			}
		}
		return true
	case nil:
		return true
	}
	if lf, ok := number(live); ok {
		if wf, ok := number(want); ok {
			return lf == wf
		}
	}
	return reflect.DeepEqual(live, want)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func toUnstructured(o client.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func fromUnstructured(u *unstructured.Unstructured, kind ManagedKind) (client.Object, error) {
	if u == nil {
		return nil, nil
	}
	o := kind.New()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o); err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return o, nil
}

// isStaleRead reports whether err means the cache was behind.
func isStaleRead(err error) bool { return errors.Is(err, errStaleRead) }
