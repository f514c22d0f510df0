package testkit

import (
	"fmt"
	"strconv"
	"strings"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// What a tenant with nothing but SimpleWebApp rights might write, each
// within the CRD's limits (16 patches of at most 16 KiB). The e2e tenant
// test checks each is refused with a reason and nothing of it exists in the
// cluster; `make bench` creates them next to ordinary apps.

func depPatch(p string) webappv1.Patch {
	return webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Deployment", Name: "web"}, Patch: p}
}

func svcPatch(p string) webappv1.Patch {
	return webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Service", Name: "web"}, Patch: p}
}

// maxPatch is the CRD's limit on one patch (spec.patches[*].patch).
const maxPatch = 16 << 10

// RefusedAttempts are abusive spec.patches, by name, that the operator must
// refuse (PatchNotAllowed or PolicyViolation) without applying anything.
func RefusedAttempts() map[string][]webappv1.Patch {
	return map[string][]webappv1.Patch{
		"aliasbomb":    {depPatch(aliasBomb())},
		"copybomb":     {depPatch(copyBomb())},
		"celbomb":      {depPatch("metadata:\n  annotations:\n    simplewebapp.example.com/include-when: \"[1,2,3,4,5,6,7,8].all(a, [1,2,3,4,5,6,7,8].all(b, [1,2,3,4,5,6,7,8].all(c, true)))\"\n")},
		"cpubomb":      CPUBomb(),
		"hostnet":      {depPatch("spec:\n  template:\n    spec:\n      hostNetwork: true\n      hostPID: true\n")},
		"privileged":   {depPatch("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        securityContext: {privileged: true, runAsUser: 0, runAsNonRoot: false}\n")},
		"hostpath":     {depPatch("- op: add\n  path: /spec/template/spec/volumes/-\n  value: {name: root, hostPath: {path: /}}\n")},
		"token":        {depPatch("spec:\n  template:\n    spec:\n      serviceAccountName: default\n      automountServiceAccountToken: true\n")},
		"exposed":      {svcPatch("spec:\n  type: LoadBalancer\n  externalIPs: [203.0.113.9]\n")},
		"hijack":       {depPatch("spec:\n  template:\n    metadata:\n      labels:\n        app: payments\n")},
		"netpeer":      {depPatch("spec:\n  template:\n    metadata:\n      labels:\n        access: db\n")},
		"sidecar":      {depPatch("spec:\n  template:\n    metadata:\n      annotations:\n        sidecar.istio.io/inject: \"true\"\n")},
		"proxyname":    {svcPatch("metadata:\n  labels:\n    service.kubernetes.io/service-proxy-name: other\n")},
		"controlplane": {depPatch("spec:\n  template:\n    spec:\n      tolerations:\n      - operator: Exists\n      nodeSelector:\n        node-role.kubernetes.io/control-plane: \"\"\n")},
		"crossns":      {depPatch("spec:\n  template:\n    spec:\n      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - topologyKey: kubernetes.io/hostname\n            namespaceSelector: {}\n            labelSelector: {matchLabels: {app.kubernetes.io/name: web}}\n")},
		"longgrace":    {depPatch("spec:\n  template:\n    spec:\n      terminationGracePeriodSeconds: 31536000\n")},
	}
}

// aliasBomb is 11 KiB of YAML that decodes to 320 MB: 4,500 plain elements
// keep the aliased share under sigs.k8s.io/yaml's limit.
func aliasBomb() string {
	alias := "spec:\n  template:\n    metadata:\n      annotations:\n" +
		"        pad: [" + strings.TrimSuffix(strings.Repeat("a,", 4500), ",") + "]\n" +
		"        l0: &l0 " + strings.Repeat("x", 2000) + "\n"
	for i := 1; i <= 4; i++ {
		refs := strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", i-1), 20), ",")
		alias += fmt.Sprintf("        l%d: &l%d [%s]\n", i, i, refs)
	}
	return alias
}

// copyBomb is 17 JSON 6902 copies, about 1 KiB, each doubling the document.
func copyBomb() string {
	var b strings.Builder
	for i := range 17 {
		fmt.Fprintf(&b, "- op: copy\n  from: /spec/template\n  path: /spec/template/metadata/annotations/c%d\n", i)
	}
	return b.String()
}

// CPUBomb is 16 patches of as many plain env entries as fit in 16 KiB each
// (over a thousand): within every size limit, but kustomize's merge of such
// lists costs minutes.
func CPUBomb() []webappv1.Patch {
	out := make([]webappv1.Patch, 16)
	for p := range out {
		var b strings.Builder
		b.WriteString("spec: {template: {spec: {containers: [{name: web, env: [")
		for i := 0; b.Len() < maxPatch-64; i++ {
			fmt.Fprintf(&b, "{name: e%s},", strconv.FormatInt(int64(p*100000+i), 36))
		}
		b.WriteString("]}]}}}\n")
		out[p] = depPatch(b.String())
	}
	return out
}

// CacheBomb is allowed, and large: 16 patches each setting an env value of
// nearly 16 KiB, so its render is a few hundred KiB. Many of them must not
// grow the operator's caches past their byte budget.
func CacheBomb() []webappv1.Patch {
	out := make([]webappv1.Patch, 16)
	for p := range out {
		out[p] = depPatch(fmt.Sprintf("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        env:\n        - name: BIG%d\n          value: %s\n", p, strings.Repeat("x", maxPatch-256)))
	}
	return out
}
