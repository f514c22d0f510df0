package guard

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/version"
)

// CRDName is the SimpleWebApp CustomResourceDefinition.
const CRDName = "simplewebapps.example.com"

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=simplewebapps.example.com,verbs=get

// CheckCRD refuses to run against a CRD older than this operator: the API
// server would prune the fields the operator does not find in the schema
// from every write, so status would silently lose them (and a spec field a
// user set would be unknown to the cluster). It names the missing fields.
func CheckCRD(ctx context.Context, c client.Reader) error {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: CRDName}, crd); err != nil {
		return fmt.Errorf("reading CRD %s: %w", CRDName, err)
	}
	missing, err := MissingCRDFields(crd)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("the installed CRD %s is older than this operator (%s): it lacks %s; apply this release's CRD (config/crd) first",
			CRDName, version.Operator, strings.Join(missing, ", "))
	}
	return nil
}

// MissingCRDFields lists the fields of the Go API that crd's schema lacks.
func MissingCRDFields(crd *apiextensionsv1.CustomResourceDefinition) ([]string, error) {
	var schema *apiextensionsv1.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == webappv1.GroupVersion.Version && v.Schema != nil {
			schema = v.Schema.OpenAPIV3Schema
		}
	}
	if schema == nil {
		return nil, fmt.Errorf("CRD %s serves no %s schema", CRDName, webappv1.GroupVersion.Version)
	}
	var missing []string
	walkFields("spec", reflect.TypeFor[webappv1.SimpleWebAppSpec](), schema.Properties["spec"], &missing)
	walkFields("status", reflect.TypeFor[webappv1.SimpleWebAppStatus](), schema.Properties["status"], &missing)
	sort.Strings(missing)
	return missing, nil
}

// walkFields notes every JSON field of t (and of the api/v1 structs it holds)
// that the schema does not have.
func walkFields(path string, t reflect.Type, schema apiextensionsv1.JSONSchemaProps, missing *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
		if schema.Items != nil && schema.Items.Schema != nil {
			schema = *schema.Items.Schema
		}
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[webappv1.SimpleWebApp]().PkgPath() {
		return // a leaf, or a type of another package (metav1.Condition, Time, Duration)
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		sub, ok := schema.Properties[name]
		if !ok {
			*missing = append(*missing, path+"."+name)
			continue
		}
		walkFields(path+"."+name, f.Type, sub, missing)
	}
}
