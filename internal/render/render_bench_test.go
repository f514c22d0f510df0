package render

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
)

// BenchmarkRender is the CPU and memory of one render of the stable package
// (no render cache): the cost of a SimpleWebApp's first reconcile.
func BenchmarkRender(b *testing.B) {
	rel, err := Channels{FS: channels.FS}.Resolve(context.Background(), webappv1.SimpleWebAppSpec{Channel: "stable"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		swa := &webappv1.SimpleWebApp{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Namespace: "bench"},
			Spec:       webappv1.SimpleWebAppSpec{Replicas: new(int32(3)), Message: "hello"},
		}
		if _, err := Render(rel, swa); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderFromTemplate is the same render when another SimpleWebApp of
// the same package and spec shape has been rendered (templates): what a
// new SimpleWebApp's first reconcile costs in a fleet.
func BenchmarkRenderFromTemplate(b *testing.B) {
	rel, err := Channels{FS: channels.FS}.Resolve(context.Background(), webappv1.SimpleWebAppSpec{Channel: "stable"})
	if err != nil {
		b.Fatal(err)
	}
	templates := newTemplates(8<<20, nil)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		swa := &webappv1.SimpleWebApp{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Namespace: "bench"},
			Spec:       webappv1.SimpleWebAppSpec{Replicas: new(int32(3)), Message: fmt.Sprintf("hello %d", i)},
		}
		if _, err := render(rel, swa, templates); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderLargestAllowedPatches is one render with spec.patches at the
// limits of patchbounds.go, in the shapes that cost kustomize's merge most:
// the CPU one SimpleWebApp can make the operator spend per spec change.
func BenchmarkRenderLargestAllowedPatches(b *testing.B) {
	rel, err := Channels{FS: channels.FS}.Resolve(context.Background(), webappv1.SimpleWebAppSpec{Channel: "stable"})
	if err != nil {
		b.Fatal(err)
	}
	for _, shape := range []struct{ patches, entries int }{{16, 15}, {2, 127}} {
		b.Run(fmt.Sprintf("%dx%d", shape.patches, shape.entries), func(b *testing.B) {
			var patches []webappv1.Patch
			for p := range shape.patches {
				patches = append(patches, envPatch(p*shape.entries, shape.entries))
			}
			for i := 0; b.Loop(); i++ {
				swa := &webappv1.SimpleWebApp{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Namespace: "bench"},
					Spec:       webappv1.SimpleWebAppSpec{Patches: patches},
				}
				if _, err := Render(rel, swa); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
