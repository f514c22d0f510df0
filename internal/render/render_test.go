package render

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/step"
)

// abusivePatches are what a tenant with only SimpleWebApp rights might try
// through spec.patches, as strategic merge patches (a map) and JSON 6902
// patches (a list). None may reach the cluster.
var abusivePatches = []struct {
	name  string
	patch webappv1.Patch
}{
	{"hostNetwork (SMP)", dep("spec:\n  template:\n    spec:\n      hostNetwork: true\n")},
	{"hostPID (SMP)", dep("spec:\n  template:\n    spec:\n      hostPID: true\n")},
	{"hostIPC (6902)", dep("- op: add\n  path: /spec/template/spec/hostIPC\n  value: true\n")},
	{"privileged (SMP)", dep("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        securityContext:\n          privileged: true\n")},
	{"privileged (6902)", dep("- op: add\n  path: /spec/template/spec/containers/0/securityContext/privileged\n  value: true\n")},
	{"run as root (SMP)", dep("spec:\n  template:\n    spec:\n      securityContext:\n        runAsUser: 0\n        runAsNonRoot: false\n")},
	{"added capabilities (6902)", dep("- op: add\n  path: /spec/template/spec/containers/0/securityContext/capabilities/add\n  value: [NET_ADMIN, SYS_ADMIN]\n")},
	{"privilege escalation (SMP)", dep("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        securityContext:\n          allowPrivilegeEscalation: true\n")},
	{"hostPath of / (SMP)", dep("spec:\n  template:\n    spec:\n      volumes:\n      - name: root\n        hostPath: {path: /}\n")},
	{"hostPath of / (6902)", dep("- op: add\n  path: /spec/template/spec/volumes/-\n  value: {name: root, hostPath: {path: /}}\n")},
	{"a Secret volume (SMP)", dep("spec:\n  template:\n    spec:\n      volumes:\n      - name: creds\n        secret: {secretName: db}\n")},
	{"another ConfigMap (6902)", dep("- op: replace\n  path: /spec/template/spec/volumes/0/configMap/name\n  value: someone-elses\n")},
	{"env from a Secret (SMP)", dep("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        env:\n        - name: P\n          valueFrom: {secretKeyRef: {name: db, key: password}}\n")},
	{"another service account (SMP)", dep("spec:\n  template:\n    spec:\n      serviceAccountName: admin\n")},
	{"token automount (6902)", dep("- op: replace\n  path: /spec/template/spec/automountServiceAccountToken\n  value: true\n")},
	{"sidecar container (SMP)", dep("spec:\n  template:\n    spec:\n      containers:\n      - name: miner\n        image: evil\n")},
	{"other image (6902)", dep("- op: replace\n  path: /spec/template/spec/containers/0/image\n  value: evil:latest\n")},
	{"finalizer (SMP)", dep("metadata:\n  finalizers: [example.com/never]\n")},
	{"owner reference (6902)", dep("- op: add\n  path: /metadata/ownerReferences\n  value: [{apiVersion: v1, kind: Namespace, name: x, uid: 0b0e9a1e-0000-4000-8000-000000000000}]\n")},
	{"include-when directive (SMP)", dep("metadata:\n  annotations:\n    simplewebapp.example.com/include-when: \"true\"\n")},
	{"handoff directive (6902)", dep("- op: add\n  path: /metadata/annotations/simplewebapp.example.com~1handoff-when\n  value: \"true\"\n")},
	{"ApplySet label (SMP)", dep("metadata:\n  labels:\n    applyset.kubernetes.io/part-of: other\n")},
	{"package's label changed (SMP)", dep("spec:\n  template:\n    metadata:\n      labels:\n        app.kubernetes.io/component: db\n")},
	{"selector rewrite (6902)", dep("- op: replace\n  path: /spec/selector/matchLabels/app.kubernetes.io~1component\n  value: db\n")},
	{"LoadBalancer (SMP)", svc("spec:\n  type: LoadBalancer\n")},
	{"externalIPs (6902)", svc("- op: add\n  path: /spec/externalIPs\n  value: [8.8.8.8]\n")},
	{"NodePort (SMP)", svc("spec:\n  type: NodePort\n")},
	{"ExternalName (6902)", svc("- op: add\n  path: /spec/externalName\n  value: evil.example.com\n")},
	{"Service selector rewrite (6902)", svc("- op: replace\n  path: /spec/selector/app.kubernetes.io~1name\n  value: victim\n")},
	{"JSON 6902 copy (CPU and memory bomb)", dep("- op: copy\n  from: /spec/template\n  path: /spec/template/metadata/annotations/a\n")},
	{"JSON 6902 move", dep("- op: move\n  from: /spec/template/spec/containers/0/image\n  path: /metadata/annotations/x\n")},
	// Labels that join other selectors, and keys other controllers act on.
	{"label an admin's Service selects (SMP)", dep("spec:\n  template:\n    metadata:\n      labels:\n        app: payments\n")},
	{"label a NetworkPolicy admits (6902)", dep("- op: add\n  path: /spec/template/metadata/labels/access\n  value: db\n")},
	{"sidecar injection annotation (SMP)", dep("spec:\n  template:\n    metadata:\n      annotations:\n        sidecar.istio.io/inject: \"true\"\n")},
	{"secret injection annotation (SMP)", dep("spec:\n  template:\n    metadata:\n      annotations:\n        vault.hashicorp.com/agent-inject: \"true\"\n")},
	{"AppArmor annotation (SMP)", dep("spec:\n  template:\n    metadata:\n      annotations:\n        container.apparmor.security.beta.kubernetes.io/web: unconfined\n")},
	{"kube-proxy selection label (SMP)", svc("metadata:\n  labels:\n    service.kubernetes.io/service-proxy-name: other\n")},
	{"DNS publishing annotation (6902)", svc("- op: add\n  path: /metadata/annotations\n  value: {external-dns.alpha.kubernetes.io/hostname: www.example.com}\n")},
	// Scheduling.
	{"key-less toleration (SMP)", dep("spec:\n  template:\n    spec:\n      tolerations: [{operator: Exists}]\n")},
	{"control-plane toleration (SMP)", dep("spec:\n  template:\n    spec:\n      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]\n")},
	{"control-plane nodeSelector (SMP)", dep("spec:\n  template:\n    spec:\n      nodeSelector: {node-role.kubernetes.io/control-plane: \"\"}\n")},
	{"control-plane node affinity (SMP)", dep("spec:\n  template:\n    spec:\n      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms: [{matchExpressions: [{key: node-role.kubernetes.io/master, operator: Exists}]}]\n")},
	{"anti-affinity over every namespace (SMP)", dep("spec:\n  template:\n    spec:\n      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - {topologyKey: kubernetes.io/hostname, namespaceSelector: {}, labelSelector: {matchLabels: {app: x}}}\n")},
	{"affinity naming namespaces (SMP)", dep("spec:\n  template:\n    spec:\n      affinity:\n        podAffinity:\n          preferredDuringSchedulingIgnoredDuringExecution:\n          - weight: 1\n            podAffinityTerm: {topologyKey: kubernetes.io/hostname, namespaces: [kube-system], labelSelector: {matchLabels: {app: x}}}\n")},
	{"nodeName (6902)", dep("- op: add\n  path: /spec/template/spec/nodeName\n  value: control-plane-0\n")},
	{"priority class (SMP)", dep("spec:\n  template:\n    spec:\n      priorityClassName: system-cluster-critical\n")},
	// Unbounded numbers.
	{"a year's grace period (SMP)", dep("spec:\n  template:\n    spec:\n      terminationGracePeriodSeconds: 31536000\n")},
	{"unbounded history (6902)", dep("- op: add\n  path: /spec/revisionHistoryLimit\n  value: 100000\n")},
	{"a probe every day (SMP)", dep("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        readinessProbe:\n          periodSeconds: 86400\n")},
	// What the API server would store and the operator's types drop.
	{"a field the operator's types do not know (SMP)", dep("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        resources:\n          limits: {memory: 64Mi}\n          sneaky: {hostPath: /}\n")},
	{"env from a node's field (SMP)", dep("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        env:\n        - name: P\n          valueFrom: {fieldRef: {fieldPath: spec.nodeSelector}}\n")},
}

func dep(patch string) webappv1.Patch {
	return webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Deployment", Name: "web"}, Patch: patch}
}

func svc(patch string) webappv1.Patch {
	return webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Service", Name: "web"}, Patch: patch}
}

func stableRelease(t *testing.T) Release {
	t.Helper()
	rel, err := Channels{FS: channels.FS}.Resolve(context.Background(), webappv1.SimpleWebAppSpec{Channel: "stable"})
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

func renderWith(rel Release, patches ...webappv1.Patch) (*Rendered, error) {
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "demo"},
		Spec: webappv1.SimpleWebAppSpec{Patches: patches}}
	return Render(rel, swa)
}

func reasonOf(err error) string {
	var se *step.Error
	if errors.As(err, &se) && se.Terminal {
		return se.Reason
	}
	return ""
}

// Every abusive patch is refused: by the package's patch policy, with the
// offending path (or operation) in the message, or, where the package lets
// patches change the field (env), by the security floor.
func TestAbusivePatchesAreNotAllowed(t *testing.T) {
	rel := stableRelease(t)
	for _, tc := range abusivePatches {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderWith(rel, tc.patch)
			if r := reasonOf(err); r != webappv1.ReasonPatchNotAllowed && r != webappv1.ReasonPolicyViolation {
				t.Fatalf("got %v, want a terminal %s or %s", err, webappv1.ReasonPatchNotAllowed, webappv1.ReasonPolicyViolation)
			}
			t.Log(err)
		})
	}
	if len(abusivePatches) < 50 {
		t.Fatalf("only %d payloads", len(abusivePatches))
	}
}

// permissive is the stable package with a patch policy that allows every
// path, as a careless package might: the security floor must still refuse
// what matters, with PolicyViolation.
func permissive(t *testing.T) Release {
	t.Helper()
	rel := stableRelease(t)
	m := fstest.MapFS{}
	if err := fs.WalkDir(rel.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(rel.Files, p)
		m[p] = &fstest.MapFile{Data: b}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	m[patchPolicyFile] = &fstest.MapFile{Data: []byte("patchable:\n  Deployment: [spec, metadata]\n  Service: [spec, metadata]\n" +
		"metadataKeys: {prefixes: [\"\"]}\ntolerationKeys: [\"\", node-role.kubernetes.io/control-plane, node-role.kubernetes.io/master]\n")}
	rel.Files = m
	return rel
}

// Whatever a package's policy allows, the floor holds: host namespaces,
// privilege, capabilities, host paths, foreign volumes, secrets, service
// accounts, token automount, extra containers' privileges and Service
// exposure, label and annotation keys others act on, control-plane and
// cross-namespace scheduling, unbounded numbers and fields the operator's
// types do not know are refused as PolicyViolation; reserved metadata stays
// PatchNotAllowed.
func TestTheFloorHoldsUnderAPermissivePackage(t *testing.T) {
	rel := permissive(t)
	want := map[string]string{
		"hostNetwork (SMP)": "restricted Pod Security", "hostPID (SMP)": "restricted Pod Security",
		"hostIPC (6902)": "restricted Pod Security", "privileged (SMP)": "restricted Pod Security",
		"privileged (6902)": "restricted Pod Security", "run as root (SMP)": "restricted Pod Security",
		"added capabilities (6902)": "restricted Pod Security", "privilege escalation (SMP)": "restricted Pod Security",
		"hostPath of / (SMP)": "restricted Pod Security", "hostPath of / (6902)": "restricted Pod Security",
		"a Secret volume (SMP)": "volumes", "another ConfigMap (6902)": "volumes",
		"env from a Secret (SMP)": "environment", "another service account (SMP)": "service account",
		"token automount (6902)": "service account", "sidecar container (SMP)": "restricted Pod Security",
		"selector rewrite (6902)": "selector", "LoadBalancer (SMP)": "service exposure",
		"externalIPs (6902)": "service exposure", "NodePort (SMP)": "service exposure",
		"ExternalName (6902)": "service exposure", "Service selector rewrite (6902)": "selector",
		"label an admin's Service selects (SMP)": "metadata keys", "label a NetworkPolicy admits (6902)": "metadata keys",
		"sidecar injection annotation (SMP)": "metadata keys", "secret injection annotation (SMP)": "metadata keys",
		"AppArmor annotation (SMP)": "metadata keys", "kube-proxy selection label (SMP)": "metadata keys",
		"DNS publishing annotation (6902)": "metadata keys",
		"key-less toleration (SMP)":        "tolerations", "control-plane toleration (SMP)": "tolerations",
		"control-plane nodeSelector (SMP)": "node placement", "control-plane node affinity (SMP)": "node placement",
		"anti-affinity over every namespace (SMP)": "pod affinity namespace", "affinity naming namespaces (SMP)": "pod affinity namespace",
		"nodeName (6902)": "node placement", "priority class (SMP)": "priority",
		"a year's grace period (SMP)": "bounds", "unbounded history (6902)": "bounds", "a probe every day (SMP)": "bounds",
		"a field the operator's types do not know (SMP)": "known fields", "env from a node's field (SMP)": "environment",
	}
	reserved := []string{"finalizer (SMP)", "owner reference (6902)", "include-when directive (SMP)",
		"handoff directive (6902)", "ApplySet label (SMP)", "package's label changed (SMP)",
		"JSON 6902 copy (CPU and memory bomb)", "JSON 6902 move"}
	for _, tc := range abusivePatches {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderWith(rel, tc.patch)
			if rule, ok := want[tc.name]; ok {
				if reasonOf(err) != webappv1.ReasonPolicyViolation || !strings.Contains(err.Error(), rule) {
					t.Fatalf("got %v, want %s naming the rule %q", err, webappv1.ReasonPolicyViolation, rule)
				}
				return
			}
			if tc.name == "other image (6902)" {
				if err != nil {
					t.Fatalf("an image change is the package's to allow: %v", err)
				}
				return
			}
			if !slices.Contains(reserved, tc.name) {
				t.Fatalf("no expectation for %q", tc.name)
			}
			if reasonOf(err) != webappv1.ReasonPatchNotAllowed {
				t.Fatalf("got %v, want %s (reserved whatever the package says)", err, webappv1.ReasonPatchNotAllowed)
			}
		})
	}
}

// Patches that tune what the package allows pass, and change the objects.
func TestAllowedPatches(t *testing.T) {
	rel := stableRelease(t)
	cases := []struct {
		name  string
		patch webappv1.Patch
		check func(r *Rendered) bool
	}{
		{"resources", dep("spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        resources:\n          limits: {memory: 128Mi}\n"),
			func(r *Rendered) bool { return strings.Contains(mustJSON(r), `"memory":"128Mi"`) }},
		{"a pod label under the package's prefix", dep("spec:\n  template:\n    metadata:\n      labels:\n        user.simplewebapp.example.com/team: web\n"),
			func(r *Rendered) bool {
				return strings.Contains(mustJSON(r), `"user.simplewebapp.example.com/team":"web"`)
			}},
		{"a Service annotation (6902)", svc("- op: add\n  path: /metadata/annotations\n  value: {user.simplewebapp.example.com/team: web}\n"),
			func(r *Rendered) bool {
				return strings.Contains(mustJSON(r), `"user.simplewebapp.example.com/team":"web"`)
			}},
		{"plain env", dep("- op: add\n  path: /spec/template/spec/containers/0/env\n  value: [{name: MODE, value: fast}]\n"),
			func(r *Rendered) bool { return strings.Contains(mustJSON(r), `"MODE"`) }},
		{"a nodeSelector", dep("spec:\n  template:\n    spec:\n      nodeSelector: {disk: ssd}\n"),
			func(r *Rendered) bool { return strings.Contains(mustJSON(r), `"disk":"ssd"`) }},
		{"a namespace change is undone by the overlay", dep("- op: replace\n  path: /metadata/namespace\n  value: kube-system\n"),
			func(r *Rendered) bool { return !strings.Contains(mustJSON(r), "kube-system") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := renderWith(rel, tc.patch)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(r) {
				t.Fatalf("the patch did not land: %s", mustJSON(r))
			}
		})
	}
}

// Patches can change what is inside rendered objects, never which objects
// are rendered; a broken patch is a render failure.
func TestPatchesCannotChangeIdentity(t *testing.T) {
	rel := stableRelease(t)
	for _, tc := range []struct {
		name   string
		patch  webappv1.Patch
		reason string
	}{
		{"rename", svc("- op: replace\n  path: /metadata/name\n  value: elsewhere\n"), webappv1.ReasonPatchNotAllowed},
		{"change kind", svc("- op: replace\n  path: /kind\n  value: Secret\n"), webappv1.ReasonPatchNotAllowed},
		{"broken path", dep("- op: replace\n  path: /spec/nosuch/field\n  value: 1\n"), webappv1.ReasonRenderFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := renderWith(rel, tc.patch); reasonOf(err) != tc.reason {
				t.Fatalf("got %v, want a terminal %s", err, tc.reason)
			}
		})
	}
}

// mustJSON is every object of r, and its handoff fields, as JSON.
func mustJSON(r *Rendered) string {
	b, err := json.Marshal(append(slices.Clone(r.Objects), r.Handoffs...))
	if err != nil {
		panic(err)
	}
	return string(b)
}
