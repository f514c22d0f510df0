package render

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// controlPlaneKeys are the node labels and taints of control-plane nodes.
// Tenant pods there would share a node with the API server's and etcd's
// credentials.
var controlPlaneKeys = []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}

// isKubernetesKey: the key (a label, annotation or taint key) is in one of
// Kubernetes' own domains.
func isKubernetesKey(key string) bool {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return false
	}
	prefix = strings.ToLower(prefix)
	for _, d := range kubernetesKeyDomains {
		if inDomain(prefix, d) {
			return true
		}
	}
	return false
}

// tolerationsAreSafe: no toleration without a key (with operator Exists it
// tolerates every taint), none of a control-plane taint, and none of
// another taint in Kubernetes' domains (node.kubernetes.io/unreachable,
// ...) unless the package's own render tolerates that key. Which other
// taints patches may tolerate is the package's (tolerationKeys).
func tolerationsAreSafe(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	t, err := in.podTemplate(o)
	if err != nil || t == nil {
		return "", "", false
	}
	var packages []string
	if bt := in.basePodTemplate(o); bt != nil {
		for _, tol := range bt.Spec.Tolerations {
			packages = append(packages, tol.Key)
		}
	}
	const rule = "tolerations"
	for i, tol := range t.Spec.Tolerations {
		switch {
		case tol.Key == "":
			return rule, fmt.Sprintf("toleration %d has no key: it tolerates every taint, the control plane's included", i), true
		case slices.Contains(controlPlaneKeys, tol.Key):
			return rule, fmt.Sprintf("toleration of %q: pods never run on control-plane nodes", tol.Key), true
		case isKubernetesKey(tol.Key) && !slices.Contains(packages, tol.Key):
			return rule, fmt.Sprintf("toleration of %q: taints in Kubernetes' own domains may be tolerated only where the package's own render does", tol.Key), true
		}
	}
	return "", "", false
}

// nodePlacementIsSafe: neither the node selector nor node affinity names a
// control-plane label, whatever the operator (NotIn or DoesNotExist on it
// is refused too: the rule reads keys, not intent); nodeName, schedulerName
// and runtimeClassName are the package's, since a nodeName skips the
// scheduler and its taint checks, another scheduler may ignore them, and a
// RuntimeClass adds its own tolerations and node selector.
func nodePlacementIsSafe(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	t, err := in.podTemplate(o)
	if err != nil || t == nil {
		return "", "", false
	}
	const rule = "node placement"
	for _, k := range controlPlaneKeys {
		if _, ok := t.Spec.NodeSelector[k]; ok {
			return rule, fmt.Sprintf("nodeSelector names %q: pods never run on control-plane nodes", k), true
		}
	}
	if a := t.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		var terms []corev1.NodeSelectorTerm
		if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			terms = append(terms, r.NodeSelectorTerms...)
		}
		for _, p := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, p.Preference)
		}
		for _, term := range terms {
			for _, r := range slices.Concat(term.MatchExpressions, term.MatchFields) {
				if slices.Contains(controlPlaneKeys, r.Key) {
					return rule, fmt.Sprintf("node affinity names %q: pods never run on control-plane nodes", r.Key), true
				}
			}
		}
	}
	want := corev1.PodSpec{}
	if bt := in.basePodTemplate(o); bt != nil {
		want = bt.Spec
	}
	switch {
	case t.Spec.NodeName != want.NodeName:
		return rule, fmt.Sprintf("nodeName must be the package's (%q), not %q", want.NodeName, t.Spec.NodeName), true
	case t.Spec.SchedulerName != want.SchedulerName:
		return rule, fmt.Sprintf("schedulerName must be the package's (%q), not %q", want.SchedulerName, t.Spec.SchedulerName), true
	case ptr.Deref(t.Spec.RuntimeClassName, "") != ptr.Deref(want.RuntimeClassName, ""):
		return rule, fmt.Sprintf("runtimeClassName must be the package's (%q), not %q", ptr.Deref(want.RuntimeClassName, ""), ptr.Deref(t.Spec.RuntimeClassName, "")), true
	}
	return "", "", false
}

// priorityIsThePackages: priorityClassName and priority are the package's.
// A higher priority preempts other tenants' pods.
func priorityIsThePackages(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	t, err := in.podTemplate(o)
	if err != nil || t == nil {
		return "", "", false
	}
	want := corev1.PodSpec{}
	if bt := in.basePodTemplate(o); bt != nil {
		want = bt.Spec
	}
	const rule = "priority"
	switch {
	case t.Spec.PriorityClassName != want.PriorityClassName:
		return rule, fmt.Sprintf("priorityClassName must be the package's (%q), not %q", want.PriorityClassName, t.Spec.PriorityClassName), true
	case !ptr.Equal(t.Spec.Priority, want.Priority):
		return rule, "priority must be the package's", true
	}
	return "", "", false
}

// podAffinityStaysInNamespace: pod affinity and anti-affinity terms,
// required and preferred, look at pods of the SimpleWebApp's own namespace
// only: no namespaces list and no namespaceSelector (the empty selector {}
// means every namespace). Across namespaces a term would tell where other
// tenants' pods run, and a required anti-affinity term keeps matching pods
// of any namespace off the nodes this pod runs on. Topology spread
// constraints have no such field: theirs select in the pod's namespace.
func podAffinityStaysInNamespace(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	t, err := in.podTemplate(o)
	if err != nil || t == nil || t.Spec.Affinity == nil {
		return "", "", false
	}
	type named struct {
		where string
		term  corev1.PodAffinityTerm
	}
	var terms []named
	collect := func(kind string, required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm) {
		for i, term := range required {
			terms = append(terms, named{fmt.Sprintf("%s required term %d", kind, i), term})
		}
		for i, w := range preferred {
			terms = append(terms, named{fmt.Sprintf("%s preferred term %d", kind, i), w.PodAffinityTerm})
		}
	}
	if a := t.Spec.Affinity.PodAffinity; a != nil {
		collect("podAffinity", a.RequiredDuringSchedulingIgnoredDuringExecution, a.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	if a := t.Spec.Affinity.PodAntiAffinity; a != nil {
		collect("podAntiAffinity", a.RequiredDuringSchedulingIgnoredDuringExecution, a.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	const rule = "pod affinity namespace"
	for _, n := range terms {
		switch {
		case len(n.term.Namespaces) > 0:
			return rule, fmt.Sprintf("%s names namespaces %v: terms may only look at this namespace's pods", n.where, n.term.Namespaces), true
		case n.term.NamespaceSelector != nil:
			return rule, fmt.Sprintf("%s has a namespaceSelector (an empty one selects every namespace): terms may only look at this namespace's pods", n.where), true
		}
	}
	return "", "", false
}
