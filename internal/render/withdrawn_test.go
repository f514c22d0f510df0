package render

import (
	"context"
	"testing"
	"testing/fstest"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// withdrawnTree is a channels tree with versions 1.0.0, 1.1.0 and 1.2.0, a
// channel listing all three, one listing only 1.2.0, and withdrawn as given.
func withdrawnTree(withdrawn string) fstest.MapFS {
	tree := fstest.MapFS{
		"rapid": {Data: []byte("manifests:\n- {name: simplewebapp, version: 1.0.0}\n- {name: simplewebapp, version: 1.1.0}\n- {name: simplewebapp, version: 1.2.0}\n")},
		"edge":  {Data: []byte("manifests:\n- {name: simplewebapp, version: 1.2.0}\n")},
	}
	for _, v := range []string{"1.0.0", "1.1.0", "1.2.0"} {
		tree["packages/simplewebapp/"+v+"/kustomization.yaml"] = &fstest.MapFile{Data: []byte("resources: []\n")}
	}
	if withdrawn != "" {
		tree[WithdrawnFile] = &fstest.MapFile{Data: []byte(withdrawn)}
	}
	return tree
}

func TestResolveAppHonoursWithdrawnVersions(t *testing.T) {
	const w120 = "withdrawn:\n- {name: simplewebapp, version: 1.2.0, reason: patch policy too wide}\n"
	app := func(spec webappv1.SimpleWebAppSpec, running string) *webappv1.SimpleWebApp {
		swa := &webappv1.SimpleWebApp{Spec: spec}
		swa.Status.Version = running
		return swa
	}
	for _, tc := range []struct {
		name       string
		embedded   string // withdrawn.yaml of the embedded tree
		dir        string // of --channels-dir ("" : no directory)
		swa        *webappv1.SimpleWebApp
		want       string // version, or "" for an error
		wantReason string // the error's reason
		withdrawn  bool   // Release.Withdrawn set
	}{
		{name: "nothing withdrawn", swa: app(webappv1.SimpleWebAppSpec{Channel: "rapid"}, ""), want: "1.2.0"},
		{name: "a channel skips its withdrawn newest", embedded: w120, swa: app(webappv1.SimpleWebAppSpec{Channel: "rapid"}, "1.0.0"), want: "1.1.0"},
		{name: "a new app on the channel skips it too", embedded: w120, swa: app(webappv1.SimpleWebAppSpec{Channel: "rapid"}, ""), want: "1.1.0"},
		{name: "an app running it keeps it, told", embedded: w120, swa: app(webappv1.SimpleWebAppSpec{Channel: "rapid"}, "1.2.0"), want: "1.2.0", withdrawn: true},
		{name: "pinning it anew is refused", embedded: w120, swa: app(webappv1.SimpleWebAppSpec{Version: "1.2.0"}, "1.1.0"), wantReason: webappv1.ReasonVersionWithdrawn},
		{name: "a pinned app running it keeps it, told", embedded: w120, swa: app(webappv1.SimpleWebAppSpec{Version: "1.2.0"}, "1.2.0"), want: "1.2.0", withdrawn: true},
		{name: "a channel with nothing left stalls", embedded: w120, swa: app(webappv1.SimpleWebAppSpec{Channel: "edge"}, ""), wantReason: webappv1.ReasonVersionWithdrawn},
		{name: "the directory withdraws too", dir: w120, swa: app(webappv1.SimpleWebAppSpec{Channel: "rapid"}, ""), want: "1.1.0"},
		{name: "the directory cannot take back the embedded withdrawal", embedded: w120, dir: "withdrawn: []\n", swa: app(webappv1.SimpleWebAppSpec{Channel: "rapid"}, ""), want: "1.1.0"},
		{name: "another package's withdrawal does not count", embedded: "withdrawn:\n- {name: other, version: 1.2.0, reason: x}\n", swa: app(webappv1.SimpleWebAppSpec{Channel: "rapid"}, ""), want: "1.2.0"},
		{name: "a malformed file stalls rather than moves", dir: "withdrawn:\n- {name: simplewebapp, version: 1.2.0, why: typo}\n", swa: app(webappv1.SimpleWebAppSpec{Channel: "rapid"}, ""), wantReason: webappv1.ReasonChannelInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Channels{FS: withdrawnTree(tc.embedded)}
			if tc.dir != "" {
				c.Dir = fstest.MapFS{WithdrawnFile: {Data: []byte(tc.dir)}}
			}
			rel, err := c.ResolveApp(context.Background(), tc.swa)
			if tc.want == "" {
				se := step.As(err, "none")
				if err == nil || se.Reason != tc.wantReason || !se.Terminal {
					t.Fatalf("got %s, %v; want a terminal %s", rel.Version, err, tc.wantReason)
				}
				return
			}
			if err != nil || rel.Version != tc.want || (rel.Withdrawn != nil) != tc.withdrawn {
				t.Fatalf("got %s (withdrawn %+v), %v; want %s (withdrawn %v)", rel.Version, rel.Withdrawn, err, tc.want, tc.withdrawn)
			}
			// Resolve, the plain lookup, ignores withdrawals.
			if plain, err := c.Resolve(context.Background(), tc.swa.Spec); err == nil && tc.embedded == "" && tc.dir == "" && plain.Version != rel.Version {
				t.Errorf("Resolve %s, ResolveApp %s with nothing withdrawn", plain.Version, rel.Version)
			}
		})
	}
}
