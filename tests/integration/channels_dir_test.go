package integration

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
)

// writeFile writes into the channels directory atomically, as a ConfigMap
// mount or a sync tool would.
func writeFile(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(channelsDir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

func writeChannel(t *testing.T, name, version string) {
	writeFile(t, name, fmt.Sprintf("manifests:\n- name: simplewebapp\n  version: %s\n", version))
}

// copyPackage copies an embedded package version into the channels directory
// as version `as`, with edits (file → new content) applied.
func copyPackage(t *testing.T, from, as string, edit map[string]func(string) string) {
	t.Helper()
	dir := "packages/simplewebapp/" + from
	entries, err := fs.ReadDir(channels.FS, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(channels.FS, dir+"/"+e.Name())
		if err != nil {
			t.Fatal(err)
		}
		content := string(b)
		if f := edit[e.Name()]; f != nil {
			content = f(content)
		}
		writeFile(t, "packages/simplewebapp/"+as+"/"+e.Name(), content)
	}
	for name, f := range edit { // new files
		if _, err := fs.Stat(channels.FS, dir+"/"+name); err != nil {
			writeFile(t, "packages/simplewebapp/"+as+"/"+name, f(""))
		}
	}
}

// A changed channel file in the directory is picked up without a restart and
// moves the SimpleWebApps that follow the channel.
func TestChannelDirectoryChangeIsPickedUp(t *testing.T) {
	ns := newNamespace(t)
	writeChannel(t, "dirmove", "1.0.0")
	swa := newWebApp(ns, "dirmove", 2, "moves with its channel")
	swa.Spec.Channel = "dirmove"
	create(t, swa)
	got := rolledOutAndReady(t, ns, "dirmove")
	if got.Status.Version != "1.0.0" || got.Status.LastHealthyVersion != "1.0.0" {
		t.Fatalf("status before the channel moved: %+v", got.Status)
	}

	t0 := time.Now()
	writeChannel(t, "dirmove", "1.1.0")
	eventually(t, timeout, "status.version 1.1.0 and a PodDisruptionBudget", func() (bool, string) {
		s, _ := condition(t, ns, "dirmove", webappv1.ConditionReady)
		err := get(t, ns, "dirmove-web", &policyv1.PodDisruptionBudget{})
		return s.Status.Version == "1.1.0" && err == nil, fmt.Sprintf("version %q, PDB: %v", s.Status.Version, err)
	})
	t.Logf("channel change applied %s after the file was written", time.Since(t0).Round(time.Millisecond))
	s, _ := condition(t, ns, "dirmove", webappv1.ConditionReady)
	if s.Status.Upgrade == nil || s.Status.Upgrade.From != "1.0.0" || s.Status.Upgrade.To != "1.1.0" {
		t.Errorf("status.upgrade = %+v, want 1.0.0 → 1.1.0", s.Status.Upgrade)
	}
	markRolledOut(t, deployment(t, ns, "dirmove", "Deployment of 1.1.0", func(d *appsv1.Deployment) (bool, string) {
		return len(d.Spec.Template.Spec.TopologySpreadConstraints) == 1, "no topology spread"
	}))
	got = waitCondition(t, ns, "dirmove", webappv1.ConditionReady, metav1.ConditionTrue, "Available")
	if got.Status.LastHealthyVersion != "1.1.0" || got.Status.Upgrade != nil {
		t.Errorf("after the roll-out: lastHealthyVersion %q, upgrade %+v", got.Status.LastHealthyVersion, got.Status.Upgrade)
	}
}

// A malformed channel file is reported and never applied; fixing it recovers.
func TestMalformedChannelFileIsReported(t *testing.T) {
	ns := newNamespace(t)
	writeChannel(t, "dirbroken", "1.0.0")
	swa := newWebApp(ns, "dirbroken", 1, "keeps running")
	swa.Spec.Channel = "dirbroken"
	create(t, swa)
	rolledOutAndReady(t, ns, "dirbroken")
	before := snapshot(t, ns)

	writeFile(t, "dirbroken", "manifests: [oops\n")
	got := waitCondition(t, ns, "dirbroken", webappv1.ConditionStalled, metav1.ConditionTrue, "ChannelInvalid")
	if msg := findCondition(got, webappv1.ConditionStalled).Message; !strings.Contains(msg, "channels directory") {
		t.Errorf("Stalled message does not say where: %q", msg)
	}
	eventually(t, timeout, "Warning event ChannelInvalid", func() (bool, string) {
		return hasEvent(t, ns, "dirbroken", "ChannelInvalid"), "no event"
	})
	if after := snapshot(t, ns); after != before {
		t.Errorf("objects changed under a malformed channel:\nbefore %s\nafter  %s", before, after)
	}

	writeChannel(t, "dirbroken", "1.0.0")
	waitCondition(t, ns, "dirbroken", webappv1.ConditionReady, metav1.ConditionTrue, "Available")
}

// Features are manifest edits: a package version that exists only in the
// channels directory adds a new kind of object (a ServiceAccount) and a new
// mapping from the spec (message → its annotation), and the running operator
// applies it with no Go change.
func TestPackageFromDirectoryAddsKindAndMapping(t *testing.T) {
	ns := newNamespace(t)
	copyPackage(t, "1.0.0", "5.0.0", map[string]func(string) string{
		"kustomization.yaml": func(s string) string {
			return strings.Replace(s, "- service.yaml\n", "- service.yaml\n- serviceaccount.yaml\n", 1)
		},
		"serviceaccount.yaml": func(string) string {
			return "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: web\nautomountServiceAccountToken: false\n"
		},
		"spec-mapping.yaml": func(s string) string {
			return s + "- source: {kind: SimpleWebApp, fieldPath: spec.message}\n" +
				"  targets:\n  - select: {kind: ServiceAccount, name: web}\n" +
				"    fieldPaths: [metadata.annotations.motd]\n    options: {create: true}\n"
		},
	})
	writeChannel(t, "dirfeature", "5.0.0")
	swa := newWebApp(ns, "feature", 1, "mapped by the package")
	swa.Spec.Channel = "dirfeature"
	create(t, swa)

	sa := &corev1.ServiceAccount{}
	eventually(t, timeout, "ServiceAccount feature-web with the message", func() (bool, string) {
		if err := get(t, ns, "feature-web", sa); err != nil {
			return false, err.Error()
		}
		return sa.Annotations["motd"] == "mapped by the package", fmt.Sprint(sa.Annotations)
	})
	if refs := sa.OwnerReferences; len(refs) != 1 || refs[0].Name != "feature" || !ptr.Deref(refs[0].Controller, false) {
		t.Errorf("owner references %+v", refs)
	}
	update(t, ns, "feature", func(s *webappv1.SimpleWebApp) { s.Spec.Message = "changed" })
	eventually(t, timeout, "annotation follows the message", func() (bool, string) {
		if err := get(t, ns, "feature-web", sa); err != nil {
			return false, err.Error()
		}
		return sa.Annotations["motd"] == "changed", fmt.Sprint(sa.Annotations)
	})
}

// A package that needs a newer operator is refused as a whole.
func TestPackageNeedingNewerOperatorIsRefused(t *testing.T) {
	ns := newNamespace(t)
	copyPackage(t, "1.0.0", "6.0.0", map[string]func(string) string{
		"kustomization.yaml": func(s string) string {
			return s + "commonAnnotations:\n  addons.k8s.io/min-operator-version: 99.0.0\n"
		},
	})
	swa := newWebApp(ns, "toonew", 1, "never rendered")
	swa.Spec.Version = "6.0.0"
	create(t, swa)
	got := waitCondition(t, ns, "toonew", webappv1.ConditionStalled, metav1.ConditionTrue, "OperatorTooOld")
	if msg := findCondition(got, webappv1.ConditionStalled).Message; !strings.Contains(msg, "99.0.0") {
		t.Errorf("message %q does not name the version needed", msg)
	}
	if err := get(t, ns, "toonew-web", &appsv1.Deployment{}); err == nil {
		t.Error("a Deployment was applied from a refused package")
	}
}
