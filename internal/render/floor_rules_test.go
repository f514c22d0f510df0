package render

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

func TestMetadataKeyNotAllowed(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want string // part of the reason; "" : allowed
	}{
		{"user.simplewebapp.example.com/team", ""},
		{"example.com/team", ""},
		{"app", "unprefixed"},
		{"access", "unprefixed"},
		{"kubernetes.io/hostname", "Kubernetes' own domains"},
		{"service.kubernetes.io/service-proxy-name", "Kubernetes' own domains"},
		{"external-dns.alpha.kubernetes.io/hostname", "Kubernetes' own domains"},
		{"container.apparmor.security.beta.kubernetes.io/web", "Kubernetes' own domains"},
		{"Node.K8s.IO/x", "Kubernetes' own domains"},
		{"notkubernetes.io/x", ""},
		{"sidecar.istio.io/inject", "Istio"},
		{"istio.io/rev", "Istio"},
		{"vault.hashicorp.com/agent-inject", "Vault"},
		{"k8s.v1.cni.cncf.io/networks", "Multus"},
		{"prometheus.io/scrape", "Prometheus"},
		{"simplewebapp.example.com/include-when", "reserved"},
		{"applyset.kubernetes.io/part-of", "reserved"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			got := metadataKeyNotAllowed(tc.key)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("metadataKeyNotAllowed(%q) = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

func TestEnvSourceNotAllowed(t *testing.T) {
	cms := []string{"x-content"}
	for _, tc := range []struct {
		name string
		vf   corev1.EnvVarSource
		want string // "" : allowed
	}{
		{"the pod's name", corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}, ""},
		{"a label of the pod", corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}, ""},
		{"a malformed label path", corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['a']x"}}, "not allowed"},
		{"another field", corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeSelector"}}, "not allowed"},
		{"another API version", corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}}, "not v1"},
		{"a resource", corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}, ""},
		{"the render's ConfigMap", corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "x-content"}, Key: "k"}}, ""},
		{"another ConfigMap", corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Key: "k"}}, "not one this SimpleWebApp renders"},
		{"a Secret", corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "k"}}, "secretKeyRef"},
		{"a file of a volume", corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "v", Path: "p", Key: "k"}}, "fileKeyRef"},
		{"no source", corev1.EnvVarSource{}, "exactly one source"},
		{"two sources", corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}, SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}, "exactly one source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := envSourceNotAllowed(&tc.vf, cms)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("envSourceNotAllowed = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestImagePolicy(t *testing.T) {
	const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name    string
		allowed string
		digest  bool
		image   string
		want    string // part of the refusal; "" : allowed
	}{
		{"any by default", "", false, "evil.example.com/miner:latest", ""},
		{"a star is any", "*", false, "evil.example.com/miner", ""},
		{"the package's repository", "docker.io/nginxinc/nginx-unprivileged", false, "docker.io/nginxinc/nginx-unprivileged:1.27.4-alpine", ""},
		{"a short Docker Hub name is expanded", "docker.io/nginxinc/nginx-unprivileged", false, "nginxinc/nginx-unprivileged:1.27", ""},
		{"an official image is under library/", "docker.io/library/nginx", false, "nginx", ""},
		{"the entry is expanded too", "nginx", false, "docker.io/library/nginx:1", ""},
		{"index.docker.io is docker.io", "docker.io", false, "index.docker.io/library/nginx", ""},
		{"whole path segments", "docker.io/nginx", false, "docker.io/nginxinc/nginx-unprivileged", "is not allowed"},
		{"a registry host", "registry.example.com", false, "registry.example.com/team/web:1", ""},
		{"a registry host with a port", "localhost:5000", false, "localhost:5000/web", ""},
		{"another registry", "registry.example.com", false, "registry.example.com.evil.io/team/web", "is not allowed"},
		{"a repository prefix", "registry.example.com/team", false, "registry.example.com/team/web", ""},
		{"beside the prefix", "registry.example.com/team", false, "registry.example.com/teamx/web", "is not allowed"},
		{"a digest required and missing", "", true, "docker.io/library/nginx:1", "has no digest"},
		{"a digest required and there", "docker.io", true, "docker.io/library/nginx" + digest, ""},
		{"a malformed reference", "docker.io", false, "Docker.io/UPPER/case", "not a valid image reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseImagePolicy(tc.allowed, tc.digest)
			if err != nil {
				t.Fatal(err)
			}
			got := p.refuses(tc.image)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("refuses(%q) = %q, want %q", tc.image, got, tc.want)
			}
		})
	}
	for _, bad := range []string{"https://registry.example.com", "registry.example.com/*", "docker.io/nginx:1.27", "docker.io/nginx" + digest, "UPPER/Case"} {
		if _, err := ParseImagePolicy(bad, false); err == nil {
			t.Errorf("--allowed-images=%s was accepted", bad)
		}
	}
}

// Check reads every container of a render: the package's default image and
// spec.image alike.
func TestImagePolicyCheckReadsTheRender(t *testing.T) {
	rel := stableRelease(t)
	p, err := ParseImagePolicy("docker.io/nginxinc/nginx-unprivileged", false)
	if err != nil {
		t.Fatal(err)
	}
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}
	r, err := Render(rel, swa)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(r); err != nil {
		t.Errorf("the package's own image is refused: %v", err)
	}
	swa.Spec.Image = "evil.example.com/miner:latest"
	if r, err = Render(rel, swa); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(r); reasonOf(err) != webappv1.ReasonImageNotAllowed || !strings.Contains(err.Error(), "evil.example.com/miner") {
		t.Errorf("spec.image outside the list: %v, want %s naming it", err, webappv1.ReasonImageNotAllowed)
	}
}
