package controllers

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

func TestParseNamespaces(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: " , ,", want: nil},
		{in: "a", want: []string{"a"}},
		{in: "team-b, a,team-b ,a", want: []string{"a", "team-b"}},
		{in: "a,Team", err: `namespace "Team"`},
		{in: "a,b/c", err: `namespace "b/c"`},
		{in: strings.Repeat("x", 64), err: "must be no more than 63"},
	} {
		got, err := ParseNamespaces(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseNamespaces(%q): error %v, want one with %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("ParseNamespaces(%q): %v", tc.in, err)
		case tc.err == "" && !slices.Equal(got, tc.want):
			t.Errorf("ParseNamespaces(%q) = %q, want %q", tc.in, got, tc.want)
		}
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
	if managed != len(ManagedKinds) {
		t.Errorf("%d managed kinds in the cache options, want %d", managed, len(ManagedKinds))
	}
}
