package generated

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/guard"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

// Every kind that any package version renders, for specs that switch every
// optional object on, is in render.ManagedKinds, and the generated role
// lets the operator cache, create, apply and prune it: a package that adds a
// kind without the Go side fails here, not in a cluster.
func TestEveryRenderedKindIsManagedAndAllowed(t *testing.T) {
	rendered := map[schema.GroupVersionKind]bool{}
	specs := []webappv1.SimpleWebAppSpec{
		{Replicas: new(int32(1))},
		{Replicas: new(int32(3)), Autoscaling: &webappv1.Autoscaling{MinReplicas: 2, MaxReplicas: 5, TargetCPUUtilizationPercentage: 80}},
	}
	for _, version := range testkit.Versions(t) {
		for _, spec := range specs {
			swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "kinds", Namespace: "demo"}, Spec: spec}
			swa.Spec.Version = version
			rel, err := render.Channels{FS: channels.FS}.Resolve(context.Background(), swa.Spec)
			if err != nil {
				t.Fatal(err)
			}
			r, err := render.Render(rel, swa)
			if err != nil {
				t.Fatalf("%s: %v", version, err)
			}
			for _, o := range r.Objects {
				rendered[o.GroupVersionKind()] = true
			}
		}
	}
	managed := map[schema.GroupVersionKind]bool{}
	for _, k := range render.ManagedKinds {
		managed[k.GVK] = true
	}
	for gvk := range rendered {
		if !managed[gvk] {
			t.Errorf("packages render %s, which render.ManagedKinds does not list", gvk)
		}
	}

	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config/rbac/role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(raw, role); err != nil {
		t.Fatal(err)
	}
	for _, k := range render.ManagedKinds {
		resource := strings.ToLower(k.GVK.Kind) + "s"
		for _, verb := range []string{"get", "list", "watch", "create", "patch", "delete"} {
			if !allows(role, k.GVK.Group, resource, verb) {
				t.Errorf("config/rbac/role.yaml does not allow %s on %s.%s: add an RBAC marker in internal/render/kinds.go and run make manifests", verb, resource, k.GVK.Group)
			}
		}
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
			t.Errorf("wildcard rule %+v", r)
		}
	}
}

func allows(role *rbacv1.ClusterRole, group, resource, verb string) bool {
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// The committed CRD has every field of the Go API; a CRD without one (an
// older release's) is named field by field, so the operator refuses to start
// against it with a clear message.
func TestCRDCheckNamesMissingFields(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config/crd/bases/example.com_simplewebapps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	if missing, err := guard.MissingCRDFields(crd); err != nil || len(missing) != 0 {
		t.Fatalf("the committed CRD lacks %v (%v)", missing, err)
	}
	old := crd.DeepCopy()
	schema := old.Spec.Versions[0].Schema.OpenAPIV3Schema
	delete(schema.Properties["spec"].Properties, "suspend")
	status := schema.Properties["status"]
	delete(status.Properties, "appliedGeneration")
	schema.Properties["status"] = status
	missing, err := guard.MissingCRDFields(old)
	if err != nil || !slices.Equal(missing, []string{"spec.suspend", "status.appliedGeneration"}) {
		t.Fatalf("missing %v (%v), want spec.suspend and status.appliedGeneration", missing, err)
	}
}
