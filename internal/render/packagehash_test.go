package render

import (
	"context"
	"testing"
	"testing/fstest"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
)

// A release's PackageHash is its files' hash, whether it is memoized (an
// embedded package) or not (one from the channels directory, which is seen
// to change).
func TestReleasePackageHash(t *testing.T) {
	ctx := context.Background()
	pinned := webappv1.SimpleWebAppSpec{Version: "1.1.0"}
	embedded := Channels{FS: channels.FS}
	for range 2 { // the second time from the memo
		rel, err := embedded.Resolve(ctx, pinned)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rel.PackageHash()
		want, _ := PackageHash(rel.Files)
		if err != nil || got != want || len(got) != 64 {
			t.Fatalf("embedded 1.1.0: PackageHash() = %q, %v; want %q", got, err, want)
		}
	}

	dir := fstest.MapFS{"packages/simplewebapp/1.1.0/kustomization.yaml": {Data: []byte("resources: []\n")}}
	fromDir := Channels{FS: channels.FS, Dir: dir}
	hashOf := func() string {
		t.Helper()
		rel, err := fromDir.Resolve(ctx, pinned)
		if err != nil {
			t.Fatal(err)
		}
		h, err := rel.PackageHash()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := hashOf()
	dir["packages/simplewebapp/1.1.0/kustomization.yaml"] = &fstest.MapFile{Data: []byte("resources: []\nnamePrefix: x-\n")}
	if after := hashOf(); after == before {
		t.Fatalf("a package in the channels directory changed, its hash did not: %s", after)
	}
	rel, _ := embedded.Resolve(ctx, pinned)
	if h, _ := rel.PackageHash(); h == before {
		t.Fatal("the directory's 1.1.0 and the embedded 1.1.0 have the same hash")
	}
}
