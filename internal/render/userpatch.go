package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// Limits on one spec.patches entry. A patch is the one place where a user's
// YAML reaches the operator as text, so it is parsed once, here, with every
// bound checked before anything expands it: YAML aliases can make a few KiB
// decode to gigabytes, and nothing after this point sees the text again.
const (
	// maxPatchBytes is the CRD's MaxLength, checked again because an old
	// CRD (version skew) or a direct etcd write need not enforce it.
	maxPatchBytes = 16 << 10
	// maxPatchDecodedBytes caps a patch's size as JSON. Without aliases JSON
	// is at most a few times the YAML; the cap makes that a promise.
	maxPatchDecodedBytes = 64 << 10
	// maxPatchDepth caps nesting: Kubernetes objects are a dozen levels deep.
	maxPatchDepth = 32
)

// preparePatches parses each of spec.patches once, bounded, and returns them
// as what kustomize reads: JSON, strategic merge patches with the object
// header kustomize needs. Anchors and aliases are refused (PatchNotAllowed),
// as are JSON 6902 operations that can make a small patch expensive and
// patches whose shape makes the merge expensive (patchbounds.go); text
// that is not YAML is a RenderFailed naming the patch.
func preparePatches(patches []webappv1.Patch) ([]webappv1.Patch, error) {
	if len(patches) == 0 {
		return nil, nil
	}
	decoded := make([]any, len(patches))
	listEntries := 0
	for i, p := range patches {
		v, err := decodePatch(p.Patch)
		if err != nil {
			var se *step.Error
			if errors.As(err, &se) {
				se.Message = fmt.Sprintf("spec.patches[%d]: %s", i, se.Message)
				return nil, se
			}
			return nil, step.Stalled(webappv1.ReasonRenderFailed, "spec.patches[%d]: %v", i, err)
		}
		if ops, ok := v.([]any); ok {
			if err := checkOperations(i, ops); err != nil {
				return nil, err
			}
		}
		if err := checkPatchShape(i, v, &listEntries); err != nil {
			return nil, err
		}
		decoded[i] = v
	}
	out := make([]webappv1.Patch, len(patches))
	for i, p := range patches {
		v := decoded[i]
		switch v := v.(type) {
		case []any:
		case map[string]any:
			addObjectHeader(v, p.Target.Kind)
		default:
			return nil, step.Stalled(webappv1.ReasonRenderFailed, "spec.patches[%d]: neither a partial object nor a list of JSON 6902 operations", i)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		out[i] = webappv1.Patch{Target: p.Target, Patch: string(b)}
	}
	return out, nil
}

// decodePatch decodes one patch's YAML (or JSON) into JSON values. It first
// reads the text as a node tree, which holds an alias as one node instead of
// a copy, and refuses anchors, aliases, a second document and deep nesting;
// only then is the text decoded, with the Kubernetes API's YAML rules.
func decodePatch(text string) (any, error) {
	if len(text) > maxPatchBytes {
		return nil, step.Stalled(webappv1.ReasonPatchNotAllowed, "%d bytes, more than the limit of %d KiB", len(text), maxPatchBytes>>10)
	}
	dec := yamlv3.NewDecoder(bytes.NewReader([]byte(text)))
	var doc yamlv3.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var more yamlv3.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, step.Stalled(webappv1.ReasonPatchNotAllowed, "more than one YAML document (write one patch per entry)")
	}
	if err := checkNodes(&doc, 0); err != nil {
		return nil, err
	}
	b, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if len(b) > maxPatchDecodedBytes {
		return nil, step.Stalled(webappv1.ReasonPatchNotAllowed, "decodes to %d bytes, more than the limit of %d KiB", len(b), maxPatchDecodedBytes>>10)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	return v, nil
}

// checkNodes refuses anchors, aliases (merge keys included: they need one)
// and nesting deeper than maxPatchDepth.
func checkNodes(n *yamlv3.Node, depth int) error {
	if depth > maxPatchDepth {
		return step.Stalled(webappv1.ReasonPatchNotAllowed, "nested deeper than %d levels (line %d)", maxPatchDepth, n.Line)
	}
	if n.Kind == yamlv3.AliasNode || n.Anchor != "" {
		return step.Stalled(webappv1.ReasonPatchNotAllowed, "YAML anchors and aliases are not allowed (line %d): write the values out", n.Line)
	}
	for _, c := range n.Content {
		if err := checkNodes(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// checkOperations refuses JSON 6902 operations that can make a small patch
// expensive (copy, move) before kustomize runs them.
func checkOperations(i int, ops []any) error {
	for j, e := range ops {
		op, _ := e.(map[string]any)
		switch op["op"] {
		case "add", "remove", "replace", "test":
		default:
			return step.Stalled(webappv1.ReasonPatchNotAllowed, "spec.patches[%d] operation %d: op %v is not allowed (only add, remove, replace and test)", i, j, quoted(op["op"]))
		}
	}
	return nil
}

func quoted(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// patchableAPIVersions are the kinds spec.patches may target (an API enum).
var patchableAPIVersions = map[string]string{"Deployment": "apps/v1", "Service": "v1"}

// addObjectHeader lets users write a strategic merge patch as just the
// fields to change: kustomize needs apiVersion, kind and a name to parse one,
// and with a target it replaces them with each matched object's.
func addObjectHeader(body map[string]any, kind string) {
	if _, ok := body["kind"]; ok {
		return
	}
	body["apiVersion"] = patchableAPIVersions[kind]
	body["kind"] = kind
	if _, ok := body["metadata"]; !ok {
		body["metadata"] = map[string]any{"name": "patched"}
	} else if m, ok := body["metadata"].(map[string]any); ok && m["name"] == nil {
		m["name"] = "patched"
	}
}
