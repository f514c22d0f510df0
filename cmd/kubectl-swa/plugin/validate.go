package plugin

import (
	"context"
	"fmt"
	"strings"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/cmd/kubectl-swa/crd"
)

// crdValidator checks a SimpleWebApp as the API server does on create, with
// apiextensions-apiserver's own code and the embedded CRD: unknown fields
// (kubectl's default strict field validation), defaults, the OpenAPI schema,
// list types and the x-kubernetes-validations CEL rules.
type crdValidator struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

func newCRDValidator() (*crdValidator, error) {
	def, err := crd.SimpleWebApp()
	if err != nil {
		return nil, fmt.Errorf("the embedded CRD: %w", err)
	}
	var props *apiextensionsv1.JSONSchemaProps
	for _, v := range def.Spec.Versions {
		if v.Name == webappv1.GroupVersion.Version && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		return nil, fmt.Errorf("the embedded CRD has no schema for %s", webappv1.GroupVersion)
	}
	internal := &apiextensionsinternal.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(props, internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, fmt.Errorf("the embedded CRD's schema is not structural: %w", err)
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(internal)
	if err != nil {
		return nil, err
	}
	return &crdValidator{structural: s, schema: sv, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
}

// validate returns u with the CRD's defaults, as the API server would store
// it, or the API server's refusal. u is not changed.
func (v *crdValidator) validate(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	obj := runtime.DeepCopyJSON(u.Object)
	// The status subresource: a create drops the status before validation.
	delete(obj, "status")
	gk := webappv1.GroupVersion.WithKind("SimpleWebApp").GroupKind()
	if unknown := pruning.PruneWithOptions(obj, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(unknown) > 0 {
		quoted := make([]string, len(unknown))
		for i, p := range unknown {
			quoted[i] = fmt.Sprintf("unknown field %q", p)
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s %q: strict decoding error: %s", gk.Kind, u.GetName(), strings.Join(quoted, ", ")))
	}
	structuraldefaulting.Default(obj, v.structural)

	// The order of customresource.Strategy.Validate: CEL only runs when the
	// schema's errors leave the object well-typed.
	errs := apiservervalidation.ValidateCustomResource(nil, obj, v.schema)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, v.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	if blocking(errs) {
		errs = append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
	} else {
		celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(gk, u.GetName(), errs)
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// withDefaults returns u with the CRD's defaults, as the API server stores
// it. Nothing is checked: plan reads exports of what the cluster accepted,
// which rules added since must not turn away.
func (v *crdValidator) withDefaults(u *unstructured.Unstructured) *unstructured.Unstructured {
	obj := runtime.DeepCopyJSON(u.Object)
	structuraldefaulting.Default(obj, v.structural)
	return &unstructured.Unstructured{Object: obj}
}

// blocking is the API server's test for errors after which the CEL rules
// would see values of the wrong type.
func blocking(errs field.ErrorList) bool {
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}
