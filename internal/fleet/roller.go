package fleet

import (
	"context"
	"time"

	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// Wants is the reconciler's own decision for one SimpleWebApp: the Key it
// would upgrade to now, if any (it follows a channel, runs a healthy
// version, and is not held back from the new one).
type Wants func(ctx context.Context, swa *webappv1.SimpleWebApp) (Key, bool)

// Roller moves the roll-outs on: while one is under way (or asked for by
// Admit) it lists the SimpleWebApps, plans, counts and advances each
// roll-out (Plan, Advance) and writes the states that changed. Idle, it
// sends nothing. Every shard runs one; they share the states in the cluster,
// and a write that lost a race is read again.
type Roller struct {
	// Client writes the states; Clientset watches them in Namespace.
	Client client.Client
	// Apps lists the SimpleWebApps of the whole fleet: uncached when the
	// operator is one of several shards (its cache holds only its own),
	// then Paged, so the bytes held at once stay bounded.
	Apps      client.Reader
	Paged     bool
	Clientset kubernetes.Interface
	Namespace string
	// Namespaces to list SimpleWebApps in; empty: all.
	Namespaces []string
	Store      *Store
	Policy     Policy
	// NewWants makes the Wants of one look at the fleet (WantsOf).
	NewWants func() Wants
	// Every is how often a roll-out under way is looked at.
	Every time.Duration
	// OnTick, when set, is called with the states after each look (metrics).
	OnTick func(states []State, apps map[Key][]App)
}

// listPage bounds the bytes of SimpleWebApps held at once.
const listPage = 250

// NeedLeaderElection is true: only the leader (of each shard) rolls out.
func (r *Roller) NeedLeaderElection() bool { return true }

// Start watches the states and runs until ctx ends.
func (r *Roller) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("rollout")
	factory := informers.NewSharedInformerFactoryWithOptions(r.Clientset, 0, informers.WithNamespace(r.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = StateLabel + "=true" }))
	inf := factory.Core().V1().ConfigMaps()
	load := func(any) { r.load(ctx, inf.Lister().ConfigMaps(r.Namespace).List) }
	if _, err := inf.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: load, UpdateFunc: func(_, o any) { load(o) }, DeleteFunc: load,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil
	}
	load(nil)
	for {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "roll-out pass failed; retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.Store.poke:
		case <-time.After(r.Every):
		}
	}
}

// Tick moves each roll-out that is under way or asked for on; with none it
// sends nothing.
func (r *Roller) Tick(ctx context.Context) error {
	active, wanted := r.Store.work()
	if len(active) == 0 && len(wanted) == 0 {
		r.report(nil)
		return nil
	}
	keys := map[Key]bool{}
	for _, st := range active {
		keys[st.Key] = true
	}
	for _, k := range wanted {
		keys[k] = true
	}
	apps, err := r.apps(ctx, keys)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, st := range active {
		if next, changed := Advance(st, apps[st.Key], r.Policy, now); changed {
			if err := r.write(ctx, next, false); err != nil {
				return err
			}
		}
	}
	for _, k := range wanted {
		if r.Store.State(k) == nil {
			if err := r.write(ctx, Plan(k, apps[k], r.Policy, now), true); err != nil {
				return err
			}
			for _, st := range r.Store.supersededBy(k) {
				if err := r.write(ctx, st, false); err != nil {
					return err
				}
			}
		}
	}
	r.report(apps)
	return nil
}

func (r *Roller) report(apps map[Key][]App) {
	if r.OnTick != nil {
		r.OnTick(r.Store.all(), apps)
	}
}

// load replaces the Store's states with the watched ConfigMaps.
func (r *Roller) load(ctx context.Context, list func(labels.Selector) ([]*corev1.ConfigMap, error)) {
	cms, err := list(labels.Everything())
	if err != nil {
		return
	}
	states := map[Key]*State{}
	for _, cm := range cms {
		st, err := FromConfigMap(cm)
		if err != nil {
			log.FromContext(ctx).Error(err, "ignoring a roll-out state")
			continue
		}
		st.resourceVersion = cm.ResourceVersion
		states[st.Key] = st
	}
	r.Store.set(states)
}

// apps lists the SimpleWebApps page by page and keeps, for each key, what
// its roll-out needs of the apps it concerns.
func (r *Roller) apps(ctx context.Context, keys map[Key]bool) (map[Key][]App, error) {
	out := map[Key][]App{}
	wants := r.NewWants()
	namespaces := r.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	for _, ns := range namespaces {
		cont := ""
		for {
			var list webappv1.SimpleWebAppList
			opts := []client.ListOption{client.InNamespace(ns)}
			if r.Paged {
				opts = append(opts, client.Limit(listPage), client.Continue(cont))
			}
			if err := r.Apps.List(ctx, &list, opts...); err != nil {
				return nil, err
			}
			for i := range list.Items {
				swa := &list.Items[i]
				if swa.Spec.Version != "" || !swa.DeletionTimestamp.IsZero() {
					continue // pinned apps are not moved by a roll-out
				}
				want, ok := wants(ctx, swa)
				for k := range keys {
					if a := AppOf(swa, k, ok && want == k); a.Relevant() {
						out[k] = append(out[k], a)
					}
				}
			}
			if cont = list.Continue; cont == "" || !r.Paged {
				break
			}
		}
	}
	return out, nil
}

// write creates or updates a state, the update only over the version of it
// that was read; a write that lost a race to another shard (or to `kubectl
// swa resume-version`) is dropped: the watch brings the winner's.
func (r *Roller) write(ctx context.Context, st *State, create bool) error {
	cm, err := st.ConfigMap(r.Namespace)
	if err != nil {
		return err
	}
	if create {
		err = r.Client.Create(ctx, cm)
	} else {
		var patch []byte
		patch, err = json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": st.resourceVersion},
			"data":     cm.Data,
		})
		if err == nil {
			err = r.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
		}
	}
	switch {
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return nil
	case err != nil:
		return fmt.Errorf("writing the roll-out state of %s: %w", st.Key, err)
	}
	st.resourceVersion = cm.ResourceVersion
	r.Store.put(st)
	log.FromContext(ctx).WithName("rollout").Info("roll-out state written", "version", st.Key.String(), "wave", st.Wave, "waves", len(st.Waves)+1,
		"failures", len(st.Failures), "halted", st.Halted != nil, "complete", st.Complete)
	return nil
}
