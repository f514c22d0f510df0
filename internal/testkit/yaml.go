package testkit

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// ParseYAML splits multi-document YAML (a render, helm template, an install
// file) into objects, skipping empty documents.
func ParseYAML(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := sigsyaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// ObjectKey names an object: Kind/namespace/name (namespace empty if
// cluster-scoped).
func ObjectKey(u *unstructured.Unstructured) string {
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

// ObjectKeys are the sorted ObjectKeys of objs.
func ObjectKeys(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, ObjectKey(o))
	}
	sort.Strings(ks)
	return ks
}
