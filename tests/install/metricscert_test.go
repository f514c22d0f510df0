package install_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// metricsCertComponents is how config/default/kustomization.yaml offers the
// metrics certificate: commented out, to be uncommented by the admin.
const metricsCertComponents = "#components:\n#- ../components/metrics-cert\n#- ../components/cert-manager\n"

// kustomizeWithMetricsCert renders config/default with both components
// uncommented, the way docs/operations.md tells the admin to, from a copy of
// config/ so that the paths stay relative.
func kustomizeWithMetricsCert(t *testing.T) []byte {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "config")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot, "config"))); err != nil {
		t.Fatal(err)
	}
	kfile := filepath.Join(dir, "default", "kustomization.yaml")
	k, err := os.ReadFile(kfile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(k), metricsCertComponents) {
		t.Fatalf("config/default/kustomization.yaml does not offer the components as\n%s", metricsCertComponents)
	}
	on := strings.ReplaceAll(metricsCertComponents, "#", "")
	if err := os.WriteFile(kfile, []byte(strings.Replace(string(k), metricsCertComponents, on, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := kustomize(filepath.Join(dir, "default"), "")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKustomizeMetricsCert: with the metrics-cert and cert-manager
// components, cert-manager issues a certificate for the metrics Service's
// DNS name, the Deployment mounts its Secret and serves it
// (--metrics-cert-dir), and config/prometheus's ServiceMonitor verifies it
// (serverName, ca) and authenticates with a ServiceAccount token Secret
// bound to the metrics-reader ClusterRole. Without the components
// config/default is unchanged.
func TestKustomizeMetricsCert(t *testing.T) {
	def := kustomizeDefault(t, "")
	withCert := kustomizeWithMetricsCert(t)
	prom, err := kustomize(filepath.Join(repoRoot, "config", "prometheus"), "")
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string][]byte{"config/default": def, "config/default with the components": withCert, "config/prometheus": prom} {
		for _, bad := range []string{"bearerTokenFile", "insecureSkipVerify"} {
			if strings.Contains(string(out), bad) {
				t.Errorf("%s renders %s", name, bad)
			}
		}
	}
	if dep := as[appsv1.Deployment](t, find(t, parse(t, def), "Deployment", "simplewebapp-controller-manager")); len(dep.Spec.Template.Spec.Volumes) > 0 ||
		slices.ContainsFunc(dep.Spec.Template.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-dir") }) {
		t.Errorf("config/default mounts a metrics certificate without the components: %+v", dep.Spec.Template.Spec)
	}

	objs := parse(t, withCert)
	svc := as[corev1.Service](t, find(t, objs, "Service", "simplewebapp-controller-manager-metrics-service"))
	dnsName := svc.Name + "." + svc.Namespace + ".svc"

	// The certificate, and the issuers it chains to, in the operator's namespace.
	cert := find(t, objs, "Certificate", "simplewebapp-metrics-server-cert")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	if !slices.Contains(dnsNames, dnsName) || secret == "" || cert.GetNamespace() != svc.Namespace {
		t.Errorf("Certificate %s/%s: dnsNames %v, secretName %q: want %s, a Secret, namespace %s", cert.GetNamespace(), cert.GetName(), dnsNames, secret, dnsName, svc.Namespace)
	}
	for c := cert; ; {
		issuerName, _, _ := unstructured.NestedString(c.Object, "spec", "issuerRef", "name")
		issuer := find(t, objs, "Issuer", issuerName)
		if issuer.GetNamespace() != svc.Namespace {
			t.Errorf("Issuer %s is in namespace %q", issuerName, issuer.GetNamespace())
		}
		caSecret, found, _ := unstructured.NestedString(issuer.Object, "spec", "ca", "secretName")
		if !found {
			break // the self-signed root
		}
		c = nil
		for _, o := range objs {
			if s, _, _ := unstructured.NestedString(o.Object, "spec", "secretName"); o.GetKind() == "Certificate" && s == caSecret {
				c = o
			}
		}
		if c == nil {
			t.Fatalf("no Certificate issues the CA Secret %s of Issuer %s", caSecret, issuerName)
		}
		if isCA, _, _ := unstructured.NestedBool(c.Object, "spec", "isCA"); !isCA {
			t.Errorf("Certificate %s signs with Issuer %s but is no CA", c.GetName(), issuerName)
		}
	}

	// The Deployment mounts the Secret and serves it.
	dep := as[appsv1.Deployment](t, find(t, objs, "Deployment", "simplewebapp-controller-manager"))
	var volume, mountPath string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			volume = v.Name
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	for _, m := range c.VolumeMounts {
		if m.Name == volume && m.ReadOnly {
			mountPath = m.MountPath
		}
	}
	if volume == "" || mountPath == "" || !slices.Contains(c.Args, "--metrics-cert-dir="+mountPath) {
		t.Errorf("Deployment: Secret %s in volume %q mounted read-only at %q, args %v: want it mounted and passed as --metrics-cert-dir", secret, volume, mountPath, c.Args)
	}

	// config/prometheus's ServiceMonitor verifies that certificate and
	// authenticates with a token allowed to get /metrics.
	pobjs := parse(t, prom)
	sm := find(t, pobjs, "ServiceMonitor", "simplewebapp-operator")
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || sm.GetNamespace() != svc.Namespace {
		t.Fatalf("ServiceMonitor in %q, endpoints %v", sm.GetNamespace(), eps)
	}
	ep := eps[0].(map[string]any)
	serverName, _, _ := unstructured.NestedString(ep, "tlsConfig", "serverName")
	caSecret, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "name")
	caKey, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "key")
	if serverName != dnsName || caSecret != secret || caKey != "ca.crt" {
		t.Errorf("ServiceMonitor tlsConfig %v: want serverName %s and ca %s/ca.crt", ep["tlsConfig"], dnsName, secret)
	}
	authType, _, _ := unstructured.NestedString(ep, "authorization", "type")
	tokenSecret, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	tokenKey, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "key")
	if authType != "Bearer" || tokenKey != "token" {
		t.Errorf("ServiceMonitor authorization %v: want Bearer with a Secret's token", ep["authorization"])
	}
	tok := as[corev1.Secret](t, find(t, pobjs, "Secret", tokenSecret))
	sa := tok.Annotations[corev1.ServiceAccountNameKey]
	if tok.Type != corev1.SecretTypeServiceAccountToken || sa == "" || tok.Namespace != sm.GetNamespace() {
		t.Fatalf("Secret %s/%s: type %s, ServiceAccount %q: want a ServiceAccount token in the ServiceMonitor's namespace", tok.Namespace, tok.Name, tok.Type, sa)
	}
	find(t, pobjs, "ServiceAccount", sa)
	reader := find(t, parse(t, def), "ClusterRole", "simplewebapp-metrics-reader")
	crb := as[rbacv1.ClusterRoleBinding](t, find(t, pobjs, "ClusterRoleBinding", "simplewebapp-metrics-reader-prometheus"))
	if crb.RoleRef.Name != reader.GetName() || !slices.Contains(crb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: tok.Namespace}) {
		t.Errorf("ClusterRoleBinding %s: %s to %v, want %s to ServiceAccount %s/%s", crb.Name, crb.RoleRef.Name, crb.Subjects, reader.GetName(), tok.Namespace, sa)
	}
}
