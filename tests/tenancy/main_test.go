// Package tenancy checks, on a full local cluster with the API server's real
// RBAC, who may do what: the tenant roles (simplewebapp-admin, -editor,
// -viewer, aggregated into admin, edit and view) add SimpleWebApp rights and
// nothing else, and in namespace mode (config/namespaced with
// --watch-namespaces=a) the operator, run with the installed ServiceAccount's
// token, reconciles in a, never touches a SimpleWebApp in b, and holds no
// cluster-wide write right. Questions are asked with `kubectl auth can-i`.
package tenancy_test

import (
	"context"
	"example.com/simplewebapp-operator/internal/testkit"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/internal/operatortest"
)

var env *operatortest.Env

func TestMain(m *testing.M) {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard()) // the tests' own clients log nothing
	var cleanups operatortest.Cleanups
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	e, err := operatortest.Setup(ctx, operatortest.Options{Name: "tenancy"}, cleanups.Add)
	if err == nil { // the build runs under ctx: wait for it
		_, err = e.OperatorBin()
	}
	cancel()
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "tenancy setup failed:", err)
	} else {
		env = e
		code = m.Run()
	}
	cleanups.Run()
	os.Exit(code)
}

// kustomize builds the kustomization in dir (in-process, as `kubectl
// apply -k` would, in the kustomize CLI's order).
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// overlay writes files (path relative to a new temporary directory →
// content, where {{root}} is replaced by the way up to the repository root)
// and returns the directory. kustomize takes no absolute path to a base.
func overlay(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		up, err := filepath.Rel(filepath.Dir(p), env.Root)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(replaceRoot(content, up)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func replaceRoot(s, up string) string { return strings.ReplaceAll(s, "{{root}}", up) }

// parse splits multi-document YAML into objects, skipping empty documents.
func parse(t *testing.T, data []byte) []*unstructured.Unstructured {
	return testkit.ParseYAML(t, data)
}

// as converts an object to its typed form.
func as[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	b, err := sigsyaml.Marshal(u.Object)
	if err == nil {
		err = sigsyaml.UnmarshalStrict(b, &v)
	}
	if err != nil {
		t.Fatalf("%s/%s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}
