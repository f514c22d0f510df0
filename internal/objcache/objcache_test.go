package objcache

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

// The cache keeps SimpleWebApps without their field managers and kubectl's
// copy of the spec; every other annotation stays.
func TestTrimApp(t *testing.T) {
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{
		Annotations:   map[string]string{lastApplied: `{"spec":{}}`, webappv1.AnnotationReconcileRequestedAt: "now"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}, {Manager: render.ManagerName, Subresource: "status"}},
	}}
	out, err := trimApp(swa)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*webappv1.SimpleWebApp)
	if len(got.ManagedFields) != 0 || got.Annotations[lastApplied] != "" || got.Annotations[webappv1.AnnotationReconcileRequestedAt] != "now" {
		t.Errorf("trimmed: managedFields %v, annotations %v", got.ManagedFields, got.Annotations)
	}
}

// A shard selects its SimpleWebApps and still trims them.
func TestWithShardKeepsTheTransform(t *testing.T) {
	sel, err := labels.Parse("shard=a")
	if err != nil {
		t.Fatal(err)
	}
	opts := WithShard(CacheOptions(), sel)
	n := 0
	for o, by := range opts.ByObject {
		if _, ok := o.(*webappv1.SimpleWebApp); ok {
			n++
			if by.Label == nil || by.Label.String() != "shard=a" || by.Transform == nil {
				t.Errorf("SimpleWebApp cache: label %v, transform set %v", by.Label, by.Transform != nil)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d cache entries for SimpleWebApps, want 1", n)
	}
}

// With namespaces the cache covers exactly them; without, it stays
// cluster-wide. The per-kind settings (managed-by label, shard selector)
// are kept: controller-runtime applies them within each namespace.
func TestWithNamespaces(t *testing.T) {
	if got := WithNamespaces(CacheOptions(), nil); got.DefaultNamespaces != nil {
		t.Errorf("no namespaces: DefaultNamespaces = %v, want nil (cluster-wide)", got.DefaultNamespaces)
	}
	shard := labels.SelectorFromSet(labels.Set{"shard": "1"})
	opts := WithNamespaces(WithShard(CacheOptions(), shard), []string{"a", "b"})
	var keys []string
	for ns := range opts.DefaultNamespaces {
		keys = append(keys, ns)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "b"}) || slices.Contains(keys, cache.AllNamespaces) {
		t.Errorf("DefaultNamespaces %v, want exactly a and b", keys)
	}
	managed := 0
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*webappv1.SimpleWebApp); ok {
			if by.Label.String() != shard.String() {
				t.Errorf("SimpleWebApp selector %v, want the shard's %v", by.Label, shard)
			}
			continue
		}
		if by.Namespaces != nil {
			t.Errorf("%T: Namespaces %v set per kind: it would override the watched namespaces", obj, by.Namespaces)
		}
		if by.Label == nil || by.Label.Empty() {
			t.Errorf("%T: lost the managed-by selector", obj)
		}
		managed++
	}
	if managed != len(render.ManagedKinds) {
		t.Errorf("%d managed kinds in the cache options, want %d", managed, len(render.ManagedKinds))
	}
}
