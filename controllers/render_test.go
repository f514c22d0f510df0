package controllers

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
)

// Patches can change what is inside rendered objects, never which objects
// are rendered or where.
func TestPatchesCannotChangeIdentity(t *testing.T) {
	cases := []struct {
		name   string
		patch  webappv1.Patch
		reason string // "" when the render must succeed
	}{
		{"modify", webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Deployment", Name: "web"},
			Patch: "spec:\n  minReadySeconds: 5\n"}, ""},
		{"rename", webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Service"},
			Patch: "- op: replace\n  path: /metadata/name\n  value: elsewhere\n"}, ReasonPatchNotAllowed},
		{"change kind", webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Service"},
			Patch: "- op: replace\n  path: /kind\n  value: Secret\n"}, ReasonPatchNotAllowed},
		{"move namespace", webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Deployment"},
			Patch: "- op: replace\n  path: /metadata/namespace\n  value: kube-system\n"}, ""},
		{"broken path", webappv1.Patch{Target: webappv1.PatchTarget{Kind: "Deployment"},
			Patch: "- op: replace\n  path: /spec/nosuch/field\n  value: 1\n"}, ReasonRenderFailed},
	}
	rel, err := Channels{FS: channels.FS}.Resolve(context.Background(), webappv1.SimpleWebAppSpec{Channel: "stable"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "demo"},
				Spec: webappv1.SimpleWebAppSpec{Patches: []webappv1.Patch{tc.patch}}}
			rendered, err := Render(rel, swa)
			var se *StepError
			switch {
			case tc.reason == "" && err != nil:
				t.Fatalf("render failed: %v", err)
			case tc.reason == "":
				for _, o := range rendered.Objects {
					if o.GetNamespace() != "demo" {
						t.Errorf("%s %s rendered into namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
					}
				}
			case !errors.As(err, &se) || se.Reason != tc.reason || !se.Terminal:
				t.Fatalf("got %v, want a terminal %s", err, tc.reason)
			}
		})
	}
}
