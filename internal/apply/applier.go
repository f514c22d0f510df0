package apply

import (
	"context"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

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

	// Writes are the operator's own last writes, to tell a cache that is
	// behind them from a change (shared with the status writer).
	Writes *OwnWrites
	fights fights
}

// cacheLag is how long an object the operator wrote may be missing from the
// cache before it counts as gone (its watch event was lost or it was
// deleted before the cache saw it).
const cacheLag = 30 * time.Second

// NewApplier returns an Applier.
func NewApplier(c client.Client, apiReader client.Reader, d dynamic.Interface, m meta.RESTMapper) *Applier {
	return &Applier{Client: c, APIReader: apiReader, Dynamic: d, Mapper: m, Writes: &OwnWrites{}}
}

// Result is what an Apply did and saw.
type Result struct {
	// Workload is the live Deployment: as the write returned it, else cached.
	Workload *appsv1.Deployment
	// Writes counts the requests that changed objects.
	Writes int
	// TakenOver describes the foreign field managers whose fields were
	// taken over (and so removed), for an event.
	TakenOver []string
}

// Apply makes the cluster hold r for swa. force applies every object even
// when nothing seems to differ (a requested reconcile).
//
// The objects go in two waves: first what the workload reads when its pods
// start (ConfigMaps: render.ManagedKind.ReadByWorkload), so that they never start
// without their volumes; then everything else (the Deployment, the Service,
// ...). The writes of one wave are independent and run in parallel: a new
// SimpleWebApp's objects cost two round trips, not one per object. The
// Service is in the second wave because its create is the slowest (the API
// server's cluster-IP allocator takes one Service at a time) and nothing
// waits for it. The first error (in render order) is returned, and a wave
// with an error stops the next.
func (a *Applier) Apply(ctx context.Context, swa *webappv1.SimpleWebApp, r *render.Rendered, force bool) (Result, error) {
	var res Result
	id := applySetID(swa)
	var first, rest []*unstructured.Unstructured
	for _, o := range r.Objects {
		if k, ok := render.LookupKind(o.GroupVersionKind()); ok && k.ReadByWorkload {
			first = append(first, o)
		} else {
			rest = append(rest, o)
		}
	}
	for _, wave := range [][]*unstructured.Unstructured{first, rest} {
		results := make([]Result, len(wave))
		errs := make([]error, len(wave))
		var wg sync.WaitGroup
		for i, o := range wave {
			partial, handoffPaths := r.Handoff(o), r.HandoffFields[render.Identity(o)]
			ensure := func() {
				live, err := a.ensure(ctx, swa, desired(swa, o, id), partial, handoffPaths, force, &results[i])
				if d, ok := live.(*appsv1.Deployment); ok {
					results[i].Workload = d
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
			res.Writes += results[i].Writes
			res.TakenOver = append(res.TakenOver, results[i].TakenOver...)
			if results[i].Workload != nil {
				res.Workload = results[i].Workload
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

// ensure makes one object match desired (and its handoff fields partial) and
// returns it as it is now. handoffPaths are the object's handoff fields,
// handed off or not (render.Rendered.HandoffFields).
func (a *Applier) ensure(ctx context.Context, swa *webappv1.SimpleWebApp, desired, partial *unstructured.Unstructured, handoffPaths []string, force bool, res *Result) (client.Object, error) {
	gvk := desired.GroupVersionKind()
	kind, ok := render.LookupKind(gvk)
	if !ok { // the floor refuses these before apply; this is a second check
		return nil, step.Stalled(webappv1.ReasonPolicyViolation, "%s is not a managed kind", gvk)
	}
	key := KeyFor(gvk.GroupKind(), desired.GetNamespace(), desired.GetName())
	live, seen, err := a.observe(ctx, swa, key, kind, desired)
	if err != nil {
		return nil, err
	}
	d := decide(seen, desired, partial, force)
	switch d.action {
	case actionWaitForCache:
		return live, nil
	case actionCreate:
		return a.create(ctx, swa, key, desired, partial, res)
	case actionRefuse:
		return nil, step.Stalled(webappv1.ReasonObjectNotOwned, "%s %s exists and is not controlled by this SimpleWebApp; it is left untouched (delete or rename it, or rename the SimpleWebApp)", gvk.Kind, desired.GetName())
	case actionNone:
		a.fights.settled(key, time.Now())
		return live, nil
	}
	var fightErr error
	if d.correction {
		// Someone changed what we wrote: correct it, unless they keep
		// doing so, then with backoff.
		ok, err := a.fights.correct(key, gvk.Kind, desired.GetName(), lastForeignManager(live.GetManagedFields()), time.Now())
		if !ok {
			return nil, err
		}
		fightErr = err
	}
	out, err := a.write(ctx, live.GetUID(), desired, partial, handoffPaths, d, res)
	if err != nil {
		return nil, err
	}
	a.Writes.Record(key, out)
	if fightErr != nil {
		return nil, fightErr
	}
	written, err := fromUnstructured(out, kind)
	if dep, ok := written.(*appsv1.Deployment); ok {
		observedIfMetadataOnly(live.(*appsv1.Deployment), dep)
	}
	return written, err
}

// observe reads the object from the cache (live is nil when there is none)
// and what decide needs of it. The object is converted to a map only when
// decide compares it.
func (a *Applier) observe(ctx context.Context, swa *webappv1.SimpleWebApp, key Key, kind render.ManagedKind, desired *unstructured.Unstructured) (client.Object, observed, error) {
	live := kind.New()
	err := a.Client.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		return nil, observed{wroteRecently: a.Writes.Within(key, cacheLag)}, nil
	}
	if err != nil {
		return nil, observed{}, err
	}
	seen := observed{exists: true, controlled: metav1.IsControlledBy(live, swa), behind: a.Writes.Behind(key, live)}
	if !seen.controlled || seen.behind {
		return live, seen, nil
	}
	liveU, err := toUnstructured(live)
	if err != nil {
		return nil, observed{}, err
	}
	seen.live, seen.foreignSensitive = liveU.Object, len(ForeignSensitiveFields(live.GetManagedFields())) > 0
	return live, seen, nil
}

// write applies what d says, with uid as a precondition, and returns the
// object as the last write left it.
func (a *Applier) write(ctx context.Context, uid types.UID, desired, partial *unstructured.Unstructured, handoffPaths []string, d decision, res *Result) (*unstructured.Unstructured, error) {
	gvk := desired.GroupVersionKind()
	mapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	ri := a.Dynamic.Resource(mapping.Resource).Namespace(desired.GetNamespace())
	var out *unstructured.Unstructured
	if d.applyHandoff {
		// Before the main apply: the handoff manager must co-own the fields
		// before render.ManagerName may stop applying them.
		if out, err = a.apply(ctx, ri, partial, uid, HandoffManager); err != nil {
			return nil, err
		}
		res.Writes++
	}
	if !d.applyObject {
		return out, nil
	}
	// Apply first: if the API server refuses it, nothing was written.
	if out, err = a.apply(ctx, ri, desired, uid, render.ManagerName); err != nil {
		return nil, err
	}
	res.Writes++
	if !leftover(out.GetManagedFields()) {
		return out, nil
	}
	// Fields of foreign managers, or of our own create, that this apply did
	// not cover: take them over, and apply again so that what the render
	// lacks is removed.
	taken, err := a.takeOver(ctx, ri, out, handoffPaths)
	if err != nil {
		return nil, err
	}
	res.TakenOver = append(res.TakenOver, taken...)
	if out, err = a.apply(ctx, ri, desired, uid, render.ManagerName); err != nil {
		return nil, err
	}
	res.Writes += 2
	return out, nil
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
