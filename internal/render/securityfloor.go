package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	psapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// The security floor: rules every rendered object must meet, whatever the
// package or the user's patches say, checked right before apply. They hold
// even in a namespace without Pod Security labels, so whoever may create a
// SimpleWebApp gets nothing through it that they could not get without the
// operator: no host access, no privilege, no other ServiceAccount's token, no
// Secret, no exposure outside the cluster.
//
// Each rule is a pure function in the style of cert-manager's readiness policy
// chain: it returns a rule name and a message when violated. The chain runs in
// order and stops at the first violation.
type floorRule func(o *unstructured.Unstructured, f *floorInput) (rule, message string, violated bool)

// floorInput is what the rules may compare a rendered object with.
type floorInput struct {
	swa *webappv1.SimpleWebApp
	// base is the package's own render (without the user's patches), by identity.
	base map[string]*unstructured.Unstructured
	// configMaps are the names of the ConfigMaps of this render.
	configMaps []string
	// decoded holds the typed Deployments read so far, by object.
	decoded map[*unstructured.Unstructured]decodedDeployment
}

var floorRules = []floorRule{
	kindIsManaged,
	fieldsAreKnown,
	metadataKeysAreSafe,
	podSecurityRestricted,
	serviceAccountIsThePackages,
	volumesAreThePackages,
	noSecretReferences,
	serviceStaysInCluster,
	selectorsKeepTheInstance,
	tolerationsAreSafe,
	nodePlacementIsSafe,
	priorityIsThePackages,
	podAffinityStaysInNamespace,
	fieldsWithinBounds,
}

// checkFloor runs the rules over every object of r.
func checkFloor(swa *webappv1.SimpleWebApp, r *Rendered, base []*unstructured.Unstructured) error {
	in := &floorInput{swa: swa, base: map[string]*unstructured.Unstructured{}}
	for _, o := range base {
		in.base[Identity(o)] = o
	}
	for _, o := range r.Objects {
		if o.GetKind() == "ConfigMap" && o.GroupVersionKind().Group == "" {
			in.configMaps = append(in.configMaps, o.GetName())
		}
	}
	for _, o := range r.Objects {
		// The handoff fields belong to the object as it runs.
		full := r.WithHandoff(o)
		for _, rule := range floorRules {
			if name, msg, violated := rule(full, in); violated {
				return step.Stalled(webappv1.ReasonPolicyViolation, "%s %s breaks the rule %q: %s", o.GetKind(), o.GetName(), name, msg)
			}
		}
	}
	return nil
}

func kindIsManaged(o *unstructured.Unstructured, _ *floorInput) (string, string, bool) {
	if _, ok := LookupKind(o.GroupVersionKind()); !ok {
		return "managed kinds", fmt.Sprintf("%s is not a kind this operator manages (internal/render/kinds.go)", o.GroupVersionKind()), true
	}
	return "", "", false
}

var podSecurity = func() psapolicy.Evaluator {
	e, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		panic(err)
	}
	return e
}()

// podSecurityRestricted evaluates pod templates with the API server's own
// Pod Security checks at the restricted level, whatever the namespace says.
func podSecurityRestricted(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	t, err := in.podTemplate(o)
	if err != nil {
		return "restricted Pod Security", err.Error(), true
	}
	if t == nil {
		return "", "", false
	}
	res := psapolicy.AggregateCheckResults(podSecurity.EvaluatePod(
		psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &t.ObjectMeta, &t.Spec))
	if !res.Allowed {
		return "restricted Pod Security", res.ForbiddenDetail(), true
	}
	return "", "", false
}

// serviceAccountIsThePackages: the pods run as the ServiceAccount the package
// names, without its token.
func serviceAccountIsThePackages(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	t, err := in.podTemplate(o)
	if err != nil || t == nil {
		return "", "", false
	}
	const rule = "service account"
	if a := t.Spec.AutomountServiceAccountToken; a == nil || *a {
		return rule, "automountServiceAccountToken must be false", true
	}
	want := ""
	if bt := in.basePodTemplate(o); bt != nil {
		want = bt.Spec.ServiceAccountName
	}
	if t.Spec.ServiceAccountName != want || t.Spec.DeprecatedServiceAccount != "" && t.Spec.DeprecatedServiceAccount != want {
		return rule, fmt.Sprintf("serviceAccountName must be the package's (%q), not %q", want, t.Spec.ServiceAccountName), true
	}
	return "", "", false
}

// volumesAreThePackages: pods mount only ConfigMaps of this render and
// emptyDirs: no Secrets, host paths, other ConfigMaps or projected tokens.
func volumesAreThePackages(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	t, err := in.podTemplate(o)
	if err != nil || t == nil {
		return "", "", false
	}
	for _, v := range t.Spec.Volumes {
		switch {
		case v.EmptyDir != nil:
		case v.ConfigMap != nil && slices.Contains(in.configMaps, v.ConfigMap.Name):
		default:
			return "volumes", fmt.Sprintf("volume %q must be an emptyDir or a ConfigMap this SimpleWebApp renders (%s)", v.Name, strings.Join(in.configMaps, ", ")), true
		}
	}
	return "", "", false
}

// noSecretReferences: containers read no Secret, no file of a volume and
// no foreign ConfigMap through their environment, and of the pod only what
// the downward API tells about the pod itself.
func noSecretReferences(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	t, err := in.podTemplate(o)
	if err != nil || t == nil {
		return "", "", false
	}
	const rule = "environment"
	for _, c := range slices.Concat(t.Spec.InitContainers, t.Spec.Containers) {
		if len(c.EnvFrom) > 0 {
			return rule, fmt.Sprintf("container %q: envFrom is not allowed", c.Name), true
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if why := envSourceNotAllowed(e.ValueFrom, in.configMaps); why != "" {
				return rule, fmt.Sprintf("container %q: env %q: %s; an env may only take a plain value, a field of the pod (%s), a resource, or a key of a ConfigMap this SimpleWebApp renders",
					c.Name, e.Name, why, strings.Join(downwardFieldPaths, ", ")), true
			}
		}
	}
	if len(t.Spec.EphemeralContainers) > 0 {
		return rule, "ephemeral containers are not allowed", true
	}
	return "", "", false
}

// downwardFieldPaths are the fieldRef paths an env may read: the pod's own
// identity, its node's name and addresses (metadata.labels['k'] and
// metadata.annotations['k'] are matched by form). Any other path, one a newer
// API server might add included, is refused.
var downwardFieldPaths = []string{
	"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels['…']", "metadata.annotations['…']",
	"spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
}

// envSourceNotAllowed says why an env's valueFrom is refused, or "".
func envSourceNotAllowed(vf *corev1.EnvVarSource, configMaps []string) string {
	n := 0
	for _, set := range []bool{vf.FieldRef != nil, vf.ResourceFieldRef != nil, vf.ConfigMapKeyRef != nil, vf.SecretKeyRef != nil, vf.FileKeyRef != nil} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return fmt.Sprintf("valueFrom must have exactly one source, not %d", n)
	case vf.FieldRef != nil:
		if v := vf.FieldRef.APIVersion; v != "" && v != "v1" {
			return fmt.Sprintf("fieldRef apiVersion %q is not v1", v)
		}
		if !isDownwardFieldPath(vf.FieldRef.FieldPath) {
			return fmt.Sprintf("fieldRef %q is not allowed", vf.FieldRef.FieldPath)
		}
	case vf.ResourceFieldRef != nil:
	case vf.ConfigMapKeyRef != nil:
		if !slices.Contains(configMaps, vf.ConfigMapKeyRef.Name) {
			return fmt.Sprintf("ConfigMap %q is not one this SimpleWebApp renders", vf.ConfigMapKeyRef.Name)
		}
	case vf.SecretKeyRef != nil:
		return "secretKeyRef is not allowed"
	default:
		return "fileKeyRef is not allowed"
	}
	return ""
}

func isDownwardFieldPath(p string) bool {
	for _, m := range []string{"metadata.labels", "metadata.annotations"} {
		if key, ok := strings.CutPrefix(p, m+"['"); ok {
			key, ok = strings.CutSuffix(key, "']")
			return ok && key != "" && !strings.ContainsAny(key, "'[]")
		}
	}
	return slices.Contains(downwardFieldPaths, p)
}

// serviceStaysInCluster: Services are ClusterIP with nothing that exposes
// them outside the cluster or points them elsewhere (CVE-2020-8554).
func serviceStaysInCluster(o *unstructured.Unstructured, _ *floorInput) (string, string, bool) {
	if o.GroupVersionKind() != corev1.SchemeGroupVersion.WithKind("Service") {
		return "", "", false
	}
	s := &corev1.Service{}
	if err := decodeStrict(o, s); err != nil {
		return "service exposure", err.Error(), true
	}
	const rule = "service exposure"
	switch {
	case s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP:
		return rule, fmt.Sprintf("type must be ClusterIP, not %s", s.Spec.Type), true
	case len(s.Spec.ExternalIPs) > 0:
		return rule, "externalIPs are not allowed", true
	case s.Spec.ExternalName != "":
		return rule, "externalName is not allowed", true
	case s.Spec.LoadBalancerIP != "" || len(s.Spec.LoadBalancerSourceRanges) > 0 || s.Spec.LoadBalancerClass != nil:
		return rule, "loadBalancer fields are not allowed", true
	}
	for _, p := range s.Spec.Ports {
		if p.NodePort != 0 {
			return rule, fmt.Sprintf("port %q: nodePort is not allowed", p.Name), true
		}
	}
	return "", "", false
}

// selectorsKeepTheInstance: Services and Deployments select only this
// instance's pods, with every label the package selects on.
func selectorsKeepTheInstance(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	var path []string
	switch o.GetKind() {
	case "Service":
		path = []string{"spec", "selector"}
	case "Deployment":
		path = []string{"spec", "selector", "matchLabels"}
	default:
		return "", "", false
	}
	got, _, _ := unstructured.NestedStringMap(o.Object, path...)
	want := map[string]string{LabelInstance: in.swa.Name}
	if b := in.base[Identity(o)]; b != nil {
		base, _, _ := unstructured.NestedStringMap(b.Object, path...)
		maps.Copy(want, base)
	}
	for k, v := range want {
		if got[k] != v {
			return "selector", fmt.Sprintf("%s must select %s=%s", strings.Join(path, "."), k, v), true
		}
	}
	return "", "", false
}
