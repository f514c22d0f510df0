// Package objcache says what the operator caches: only the objects it
// manages, trimmed of what nothing reads, with repeated strings interned, so
// its memory grows with SimpleWebApps, not with the cluster.
package objcache

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
)

// CacheOptions caches only the objects this operator manages (render.ManagedKinds
// with its managed-by label), not every Deployment, Service and ConfigMap of
// the cluster, and trims their field managers: the operator's memory grows
// with SimpleWebApps, not with the cluster.
func CacheOptions() cache.Options {
	managed := cache.ByObject{
		Label:     labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagerName}),
		Transform: trimManagedFields,
	}
	byObject := map[client.Object]cache.ByObject{}
	for _, k := range render.ManagedKinds {
		byObject[k.New()] = managed
	}
	byObject[&webappv1.SimpleWebApp{}] = cache.ByObject{Transform: trimApp}
	return cache.Options{ByObject: byObject}
}

// trimApp is the cache's transform of SimpleWebApps: nothing reads their
// field managers or kubectl's client-side copy of the spec, which together
// are larger than the rest of the object.
func trimApp(obj any) (any, error) {
	o, ok := obj.(client.Object)
	if !ok {
		return obj, nil
	}
	o.SetManagedFields(nil)
	if ann := o.GetAnnotations(); ann[lastApplied] != "" {
		ann = maps.Clone(ann)
		delete(ann, lastApplied)
		o.SetAnnotations(ann)
	}
	return o, nil
}

// lastApplied is kubectl's client-side apply annotation.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// WithShard limits opts to the SimpleWebApps that selector matches: an
// operator Deployment per shard label value splits a large fleet, as Flux
// shards its controllers (sharding.fluxcd.io/key). Moving a SimpleWebApp to
// another shard hands it over: the old shard's cache drops it, the new one
// finds its objects up to date and writes nothing.
func WithShard(opts cache.Options, selector labels.Selector) cache.Options {
	if selector == nil || selector.Empty() {
		return opts
	}
	if opts.ByObject == nil {
		opts.ByObject = map[client.Object]cache.ByObject{}
	}
	for o, by := range opts.ByObject {
		if _, ok := o.(*webappv1.SimpleWebApp); ok {
			delete(opts.ByObject, o)
			by.Label = selector
			opts.ByObject[&webappv1.SimpleWebApp{}] = by
			return opts
		}
	}
	opts.ByObject[&webappv1.SimpleWebApp{}] = cache.ByObject{Label: selector}
	return opts
}

// WithNamespaces limits opts to namespaces (--watch-namespaces): the cache
// lists and watches SimpleWebApps and their children only there, so the
// operator needs rights only there (Roles instead of a ClusterRole), and a
// SimpleWebApp elsewhere is never seen. Empty keeps the cluster-wide cache.
// Reads that bypass the cache (the CRD check at start) are unaffected.
func WithNamespaces(opts cache.Options, namespaces []string) cache.Options {
	if len(namespaces) == 0 {
		return opts
	}
	opts.DefaultNamespaces = map[string]cache.Config{}
	for _, ns := range namespaces {
		opts.DefaultNamespaces[ns] = cache.Config{}
	}
	return opts
}

// trimManagedFields is the cache's transform of managed objects: it keeps
// what the Applier reads from field managers (which foreign managers own
// what outside status) and drops the rest, so the cache stays small: the
// entries of subresources (status, scale), the operator's own entries
// (nothing reads them from the cache: a take-over reads the write's
// response) and the field sets of foreign managers that own no field that
// matters for security or exposure (the create's entry alone is larger
// than the rest of a small object's metadata). The strings that repeat across objects are interned
// (internMeta).
func trimManagedFields(obj any) (any, error) {
	o, ok := obj.(client.Object)
	if !ok {
		return obj, nil
	}
	defer internMeta(o)
	entries := o.GetManagedFields()
	if len(entries) == 0 {
		return obj, nil
	}
	kept := make([]metav1.ManagedFieldsEntry, 0, len(entries))
	for _, e := range entries {
		if !apply.IsForeign(e) {
			continue
		}
		switch {
		case e.FieldsV1 != nil && len(apply.SensitiveFields(e.FieldsV1.GetRawBytes())) == 0:
			// A foreign manager's fields are read only when they matter.
			e.FieldsV1 = nil
		}
		kept = append(kept, e)
	}
	o.SetManagedFields(kept)
	return o, nil
}
