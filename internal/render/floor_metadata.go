package render

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kubernetesKeyDomains are Kubernetes' own label and annotation domains:
// their keys steer the kubelet, kube-proxy, the scheduler, the cloud
// provider and add-ons (service.kubernetes.io/service-proxy-name,
// container.apparmor.security.beta.kubernetes.io/*,
// seccomp.security.alpha.kubernetes.io/*, node.kubernetes.io/*,
// external-dns.alpha.kubernetes.io/*, cluster-autoscaler.kubernetes.io/*,
// service.beta.kubernetes.io/aws-load-balancer-*, ...).
var kubernetesKeyDomains = []string{"kubernetes.io", "k8s.io"}

// deniedKeyDomains are domains of well-known controllers that act on the
// labels and annotations of pods and Services: injecting sidecars and
// secrets, attaching networks, exposing, scraping, syncing or blocking
// nodes. A key in one of them, or in a subdomain, gets a tenant what that
// controller does for whoever may label a pod.
var deniedKeyDomains = []struct{ domain, readBy string }{
	{"istio.io", "Istio (sidecar injection, traffic interception)"},
	{"linkerd.io", "Linkerd (proxy injection)"},
	{"hashicorp.com", "Vault and Consul (secret and sidecar injection)"},
	{"cert-manager.io", "cert-manager (certificates)"},
	{"argoproj.io", "Argo CD, Rollouts and Workflows (sync and hooks)"},
	{"fluxcd.io", "Flux (reconciliation and pruning)"},
	{"kyverno.io", "Kyverno (policy exceptions and mutation)"},
	{"gatekeeper.sh", "OPA Gatekeeper (policy exemptions)"},
	{"prometheus.io", "Prometheus' annotation-based scraping (the pod's answers land in the cluster's monitoring)"},
	{"cncf.io", "Multus (k8s.v1.cni.cncf.io/networks: further pod networks)"},
	{"projectcalico.org", "Calico (fixed pod IP addresses, IP pools)"},
	{"cilium.io", "Cilium (global services, policy)"},
	{"openshift.io", "OpenShift (security context constraints)"},
	{"dapr.io", "Dapr (sidecar injection)"},
	{"kuma.io", "Kuma (sidecar injection)"},
	{"openservicemesh.io", "Open Service Mesh (sidecar injection)"},
	{"opentelemetry.io", "the OpenTelemetry Operator (instrumentation injection)"},
	{"jaegertracing.io", "the Jaeger Operator (sidecar injection)"},
	{"datadoghq.com", "Datadog (injection and checks)"},
	{"karpenter.sh", "Karpenter (do-not-disrupt blocks node consolidation)"},
	{"keda.sh", "KEDA (scaling)"},
	{"velero.io", "Velero (backup hooks run commands)"},
	{"stakater.com", "Reloader (restarts on Secret changes)"},
	{"appscode.com", "config-syncer (copies objects to other namespaces)"},
	{"metallb.universe.tf", "MetalLB (addresses)"},
	{"metallb.io", "MetalLB (addresses)"},
	{"amazonaws.com", "AWS controllers (IAM roles, load balancers)"},
	{"azure.workload.identity", "Azure Workload Identity (token injection)"},
	{"gke.io", "GKE (workload identity)"},
	{"cloud.google.com", "Google Cloud (load balancers, network endpoint groups)"},
}

// metadataPlaces are the label and annotation maps the metadata rule reads.
var metadataPlaces = []struct {
	name string
	path []string
}{
	{"label", []string{"metadata", "labels"}},
	{"annotation", []string{"metadata", "annotations"}},
	{"pod template label", []string{"spec", "template", "metadata", "labels"}},
	{"pod template annotation", []string{"spec", "template", "metadata", "annotations"}},
}

// metadataKeysAreSafe: a label or annotation key that the package's own
// render does not set (one a patch added) is prefixed, and outside
// Kubernetes' domains, the operator's reserved prefixes and the domains of
// well-known controllers. Other objects in the cluster select and act on
// such keys: an unprefixed app=payments joins an admin's Service, access=db
// a NetworkPolicy's peers, sidecar.istio.io/inject a mesh. A package's
// metadataKeys cannot widen this.
func metadataKeysAreSafe(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	base := in.base[Identity(o)]
	for _, place := range metadataPlaces {
		got, _, _ := unstructured.NestedMap(o.Object, place.path...)
		var had map[string]any
		if base != nil {
			had, _, _ = unstructured.NestedMap(base.Object, place.path...)
		}
		keys := make([]string, 0, len(got))
		for k := range got {
			if _, ok := had[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if why := metadataKeyNotAllowed(k); why != "" {
				return "metadata keys", fmt.Sprintf("%s %q: %s", place.name, k, why), true
			}
		}
	}
	return "", "", false
}

// metadataKeyNotAllowed says why a key a patch added is refused, or "".
func metadataKeyNotAllowed(key string) string {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return "unprefixed keys are not allowed: Services, NetworkPolicies and other objects select on them; use a prefix the package allows"
	}
	for _, r := range reservedKeyPrefixes {
		if strings.HasPrefix(key, r) {
			return "the prefix " + r + " is reserved for the operator and its tools"
		}
	}
	prefix = strings.ToLower(prefix)
	for _, d := range kubernetesKeyDomains {
		if inDomain(prefix, d) {
			return "keys in Kubernetes' own domains (kubernetes.io, k8s.io and their subdomains) are not allowed: the kubelet, kube-proxy, the scheduler and add-ons act on them"
		}
	}
	for _, d := range deniedKeyDomains {
		if inDomain(prefix, d.domain) {
			return fmt.Sprintf("keys in %s and its subdomains are not allowed: %s acts on them", d.domain, d.readBy)
		}
	}
	return ""
}

// inDomain: host is domain or one of its subdomains.
func inDomain(host, domain string) bool {
	return host == domain || strings.HasSuffix(host, "."+domain)
}
