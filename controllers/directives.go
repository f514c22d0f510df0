package controllers

import (
	"fmt"

	"github.com/blang/semver/v4"
	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Annotations a package may put on its objects; the render acts on them and
// strips them, so they never reach the cluster.
const (
	// AnnotationIncludeWhen holds a CEL expression over `self`, the
	// SimpleWebApp being rendered (with the package's defaults): the object is
	// rendered only when it is true. Example: "self.spec.replicas > 1".
	AnnotationIncludeWhen = "simplewebapp.example.com/include-when"
	// AnnotationMinOperatorVersion is kdp's: the oldest operator able to render
	// the package. An older operator refuses the version instead of applying
	// half of it.
	AnnotationMinOperatorVersion = "addons.k8s.io/min-operator-version"
)

// OperatorVersion is this operator's version, compared with
// AnnotationMinOperatorVersion. Release builds set it with
// -ldflags "-X example.com/simplewebapp-operator/controllers.OperatorVersion=...".
var OperatorVersion = "0.2.0"

// applyDirectives filters and cleans rendered objects by their annotations.
func applyDirectives(version string, objs []*unstructured.Unstructured, instance map[string]any) ([]*unstructured.Unstructured, error) {
	operator, err := semver.ParseTolerant(OperatorVersion)
	if err != nil {
		return nil, fmt.Errorf("operator version %q: %w", OperatorVersion, err)
	}
	kept := objs[:0]
	for _, o := range objs {
		ann := o.GetAnnotations()
		if minVersion, ok := ann[AnnotationMinOperatorVersion]; ok {
			v, err := semver.ParseTolerant(minVersion)
			if err != nil {
				return nil, stalled(ReasonRenderFailed, "package %s: %s %s: invalid %s %q", version, o.GetKind(), o.GetName(), AnnotationMinOperatorVersion, minVersion)
			}
			if operator.LT(v) {
				return nil, stalled(ReasonOperatorTooOld, "package %s needs operator %s or newer; this operator is %s", version, minVersion, OperatorVersion)
			}
		}
		if expr, ok := ann[AnnotationIncludeWhen]; ok {
			include, err := evalCondition(expr, instance)
			if err != nil {
				return nil, stalled(ReasonRenderFailed, "package %s: %s %s: %s: %v", version, o.GetKind(), o.GetName(), AnnotationIncludeWhen, err)
			}
			if !include {
				continue
			}
		}
		delete(ann, AnnotationIncludeWhen)
		delete(ann, AnnotationMinOperatorVersion)
		if len(ann) == 0 {
			ann = nil
		}
		o.SetAnnotations(ann)
		kept = append(kept, o)
	}
	return kept, nil
}

func evalCondition(expr string, instance map[string]any) (bool, error) {
	// Numbers from YAML are float64: compare them with int literals as numbers.
	env, err := cel.NewEnv(cel.Variable("self", cel.DynType), cel.CrossTypeNumericComparisons(true))
	if err != nil {
		return false, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return false, iss.Err()
	}
	prg, err := env.Program(ast)
	if err != nil {
		return false, err
	}
	out, _, err := prg.Eval(map[string]any{"self": instance})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%q is %T, not a bool", expr, out.Value())
	}
	return b, nil
}
