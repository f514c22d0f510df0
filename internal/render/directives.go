package render

import (
	"fmt"
	"strings"
	"sync"

	"github.com/blang/semver/v4"
	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	apiservercel "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
	"example.com/simplewebapp-operator/internal/version"
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
	// AnnotationHandoffFields lists fields of the object (dot paths, comma
	// separated) that the operator applies under HandoffManager, so that it
	// can stop applying them without deleting them.
	AnnotationHandoffFields = "simplewebapp.example.com/handoff-fields"
	// AnnotationHandoffWhen is a CEL expression over `self`: while true, the
	// operator does not apply the handoff fields and leaves them to whoever
	// sets them (an autoscaler setting spec.replicas through /scale).
	AnnotationHandoffWhen = "simplewebapp.example.com/handoff-when"
)

// applyDirectives filters and cleans rendered objects by their annotations,
// and splits off the handoff fields.
func applyDirectives(rel Release, objs []*unstructured.Unstructured, instance map[string]any) (*Rendered, error) {
	pkg := rel.Version
	operator, err := semver.ParseTolerant(version.Operator)
	if err != nil {
		return nil, fmt.Errorf("operator version %q: %w", version.Operator, err)
	}
	out := &Rendered{}
	for _, o := range objs {
		ann := o.GetAnnotations()
		if minVersion, ok := ann[AnnotationMinOperatorVersion]; ok {
			v, err := semver.ParseTolerant(minVersion)
			if err != nil {
				return nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s: %s %s: invalid %s %q", pkg, o.GetKind(), o.GetName(), AnnotationMinOperatorVersion, minVersion)
			}
			if operator.LT(v) {
				return nil, step.Stalled(webappv1.ReasonOperatorTooOld, "package %s needs operator %s or newer; this operator is %s", pkg, minVersion, version.Operator)
			}
		}
		if expr, ok := ann[AnnotationIncludeWhen]; ok {
			include, err := evalCondition(expr, instance)
			if err != nil {
				return nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s: %s %s: %s: %v", pkg, o.GetKind(), o.GetName(), AnnotationIncludeWhen, err)
			}
			if !include {
				continue
			}
		}
		fields := HandoffPaths(ann)
		if len(fields) > 0 {
			if out.HandoffFields == nil {
				out.HandoffFields = map[string][]string{}
			}
			out.HandoffFields[Identity(o)] = fields
		}
		handoff, err := splitHandoff(o, fields, ann[AnnotationHandoffWhen], instance)
		if err != nil {
			return nil, step.Stalled(webappv1.ReasonRenderFailed, "package %s: %s %s: %v", pkg, o.GetKind(), o.GetName(), err)
		}
		for _, k := range []string{AnnotationIncludeWhen, AnnotationMinOperatorVersion, AnnotationHandoffFields, AnnotationHandoffWhen} {
			delete(ann, k)
		}
		if len(ann) == 0 {
			ann = nil
		}
		o.SetAnnotations(ann)
		out.Objects = append(out.Objects, o)
		if handoff != nil {
			out.Handoffs = append(out.Handoffs, handoff)
		}
	}
	return out, nil
}

// splitHandoff removes the handoff fields from o. It returns them as a
// partial object to apply as HandoffManager, or nil when they are handed off
// (or o has none).
func splitHandoff(o *unstructured.Unstructured, fields []string, when string, instance map[string]any) (*unstructured.Unstructured, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	handedOff := false
	if when != "" {
		var err error
		if handedOff, err = evalCondition(when, instance); err != nil {
			return nil, fmt.Errorf("%s: %w", AnnotationHandoffWhen, err)
		}
	}
	partial := &unstructured.Unstructured{}
	partial.SetAPIVersion(o.GetAPIVersion())
	partial.SetKind(o.GetKind())
	partial.SetName(o.GetName())
	partial.SetNamespace(o.GetNamespace())
	for _, f := range fields {
		path := strings.Split(f, ".")
		v, found, err := unstructured.NestedFieldCopy(o.Object, path...)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", AnnotationHandoffFields, f, err)
		}
		if !found {
			continue
		}
		unstructured.RemoveNestedField(o.Object, path...)
		if err := unstructured.SetNestedField(partial.Object, v, path...); err != nil {
			return nil, err
		}
	}
	if handedOff {
		return nil, nil
	}
	return partial, nil
}

// HandoffPaths are the dot paths that AnnotationHandoffFields lists.
func HandoffPaths(ann map[string]string) []string {
	var out []string
	for _, f := range strings.Split(ann[AnnotationHandoffFields], ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// celEnv is the Kubernetes CEL environment (the one CRD validation rules and
// ValidatingAdmissionPolicies use: its libraries and cost model) with the
// instance bound to `self`.
var celEnv = func() *cel.Env {
	envSet, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: environment.DefaultCompatibilityVersion(),
		// Numbers from YAML are float64: compare them with int literals as numbers.
		EnvOptions: []cel.EnvOption{cel.Variable("self", cel.DynType), cel.CrossTypeNumericComparisons(true)},
	})
	if err != nil {
		panic(err)
	}
	env, err := envSet.Env(environment.NewExpressions)
	if err != nil {
		panic(err)
	}
	return env
}()

// celCostLimit bounds one evaluation, as the API server bounds one
// validation rule.
const celCostLimit = apiservercel.PerCallLimit

// celPrograms holds each expression compiled once: expressions come from
// packages, so there are as many as package versions have directives.
var celPrograms sync.Map // expression → cel.Program

func celProgram(expr string) (cel.Program, error) {
	if p, ok := celPrograms.Load(expr); ok {
		return p.(cel.Program), nil
	}
	ast, iss := celEnv.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prg, err := celEnv.Program(ast, cel.CostLimit(celCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, err
	}
	celPrograms.Store(expr, prg)
	return prg, nil
}

func evalCondition(expr string, instance map[string]any) (bool, error) {
	prg, err := celProgram(expr)
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
